"""``trainwell doctor SCRIPT``: run an unmodified training script under the doctor.

The script runs as ``python SCRIPT ARGS`` would (``__main__``, ``sys.argv``, its folder
on ``sys.path``); its output and exit code pass through. It can be stopped after N
optimizer steps. A script that crashes still gets its report.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path

import torch

from trainwell.doctor.crash import explain
from trainwell.doctor.events import StopTraining
from trainwell.doctor.findings import to_json
from trainwell.doctor.frame import Doctor
from trainwell.doctor.overfit import OverfitCheck
from trainwell.doctor.registry import default_probes
from trainwell.doctor.summary import report_text
from trainwell.errors import UserError


def run_script(
    script: str,
    args: list[str],
    max_steps: int | None = None,
    json_path: str | None = None,
    overfit: bool = False,
) -> int:
    """Run ``script`` under the doctor, print the report; return the script's exit code.

    With ``overfit``, every batch of the script's training DataLoader is replaced by its
    first batch, and the report ends with whether the loss went to near zero (the
    check that tells a data bug from a model bug).
    """
    path = Path(script)
    _check_args(path, max_steps, json_path)
    saved_argv, saved_path = sys.argv, list(sys.path)
    anomaly = torch.is_anomaly_enabled()  # the script's own anomaly mode ends with it
    sys.argv = [script, *args]
    sys.path.insert(0, str(path.resolve().parent))
    check = OverfitCheck() if overfit else None
    doc = Doctor(probes=default_probes() + ([check] if check else []), max_steps=max_steps)
    if check is not None:
        doc.swap_batch = check.swap
    code, stopped = 0, False
    namespace: dict = {}
    try:
        with doc:
            try:
                # Keep the script's globals until the probes have judged the run (at the
                # end of the `with`): runpy would free them, models and all, on return.
                namespace = runpy.run_path(str(path), run_name="__main__")
            except StopTraining:
                stopped = True
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception as exc:
                _print_user_traceback(exc)
                explain(doc, exc)  # an out-of-memory, a backward through a freed graph
                code = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        torch.set_anomaly_enabled(anomaly)
    del namespace
    print(report_text(doc, stopped), file=sys.stderr)
    extra = {}
    if check is not None:
        extra["overfit"] = verdict = check.verdict()
        print(verdict["message"], file=sys.stderr)
    if json_path:
        text = to_json(
            doc.findings,
            steps=doc.steps,
            stopped_early=stopped,
            exit_code=code,
            errors=doc.errors,
            **extra,
        )
        try:
            Path(json_path).write_text(text)
        except OSError as exc:  # the folder went away or the disk filled during the run
            raise UserError(f"doctor: --json: cannot write {json_path}: {exc.strerror}") from None
    return code


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback as Python prints it, less the doctor's own frames (its wrappers
    around torch calls): the user reads their code and torch's, nothing else."""
    doctor_dir = str(Path(__file__).resolve().parent)
    te = traceback.TracebackException.from_exception(exc)
    te.stack = traceback.StackSummary.from_list(
        [f for f in te.stack if not str(Path(f.filename).resolve()).startswith(doctor_dir)]
    )
    print("".join(te.format()), end="", file=sys.stderr)


def _check_args(path: Path, max_steps: int | None, json_path: str | None) -> None:
    if not path.is_file():
        raise UserError(f"doctor: script {path} does not exist")
    if max_steps is not None and max_steps < 1:
        raise UserError(f"doctor: --max-steps must be >= 1; got {max_steps}")
    if json_path:
        # Checked before the script runs: a long run must not end on a path it cannot write.
        _check_writable(Path(json_path), "doctor: --json")


def _check_writable(path: Path, what: str) -> None:
    """Refuse, in one line, a file path whose folder is missing or cannot be written."""
    folder = path.parent
    if path.is_dir():
        raise UserError(f"{what} {path} is a folder; give the file to write")
    if not folder.is_dir():
        raise UserError(f"{what} {path}: the folder {folder} does not exist")
    writable = os.access(path, os.W_OK) if path.exists() else os.access(folder, os.W_OK | os.X_OK)
    if not writable:
        raise UserError(f"{what} {path} cannot be written (permission denied)")


__all__ = ["report_text", "run_script"]
