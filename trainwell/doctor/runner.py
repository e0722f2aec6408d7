"""``trainwell doctor SCRIPT``: run an unmodified training script under the doctor.

The script runs as ``python SCRIPT ARGS`` would (``__main__``, ``sys.argv``, its folder
on ``sys.path``); its output and exit code pass through. It can be stopped after N
optimizer steps. A script that crashes, or is stopped by SIGINT / SIGTERM, still gets its
report; training in ``multiprocessing`` children is watched there and merged in.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import signal
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainwell.doctor.children import ChildWatch
from trainwell.doctor.crash import OOM_MARKERS, explain
from trainwell.doctor.events import Probe, StopTraining
from trainwell.doctor.findings import to_json
from trainwell.doctor.frame import Doctor
from trainwell.doctor.interrupt import SignalWatch, Terminated
from trainwell.doctor.overfit import OverfitCheck
from trainwell.doctor.registry import default_probes
from trainwell.doctor.sites import is_user_file
from trainwell.doctor.summary import report_text
from trainwell.errors import UserError
from trainwell.outputs import check_output, check_output_dir

if TYPE_CHECKING:  # imported where used: --memory and --profile are rare
    from trainwell.doctor.memory_series import MemorySeries, ScriptProfile

# What --memory and --profile write into --out (checked before the script runs).
OUT_FILES = ("memory.csv", "memory.png", "memory_summary.txt", "memory_oom.txt",
             "profile/trace.json", "profile/profile_ops.csv")  # fmt: skip


@dataclass
class Extras:
    """What ``--overfit``, ``--memory`` and ``--profile`` add to a run (none: nothing)."""

    overfit: OverfitCheck | None = None
    memory: MemorySeries | None = None
    profile: ScriptProfile | None = None

    def probes(self) -> list[Probe]:
        return [p for p in (self.overfit, self.memory, self.profile) if p is not None]


@dataclass
class Outcome:
    """How the script ended: its exit code, cut at --max-steps, stopped by a signal."""

    code: int = 0
    stopped: bool = False
    signum: int | None = None
    where: str = ""  # the user's line that was running when the signal came


def run_script(
    script: str,
    args: list[str],
    max_steps: int | None = None,
    json_path: str | None = None,
    overfit: bool = False,
    memory: bool = False,
    profile: bool = False,
    out_dir: str | None = None,
) -> int:
    """Run ``script`` under the doctor, print the report; return the script's exit code.

    With ``overfit``, every batch of the script's training DataLoader is replaced by its
    first batch, and the report ends with whether the loss went to near zero (the
    check that tells a data bug from a model bug). With ``memory`` / ``profile``, the
    memory series / the profiler's files go to ``out_dir`` (default: the folder of
    ``json_path``, else ``trainwell-doctor/``). SIGINT and SIGTERM stop the script and
    the report still comes; the code is then 128 + the signal number.
    """
    path = Path(script)
    _check_args(path, max_steps, json_path)
    extras = _extras(overfit, memory, profile, out_dir, json_path)
    doc = Doctor(probes=default_probes() + extras.probes(), max_steps=max_steps)
    if extras.overfit is not None:
        doc.swap_batch = extras.overfit.swap
    saved_argv, saved_path = sys.argv, list(sys.path)
    anomaly = torch.is_anomaly_enabled()  # the script's own anomaly mode ends with it
    start_method = multiprocessing.get_start_method(allow_none=True)  # and its mp.set_start_method
    sys.argv = [script, *args]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        with ChildWatch(doc, max_steps) as children:
            outcome = _execute(doc, path, extras)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        torch.set_anomaly_enabled(anomaly)
        multiprocessing.set_start_method(start_method, force=True)
    children.merge_into(doc)
    _report(doc, outcome, children, extras, json_path)
    return outcome.code


def _execute(doc: Doctor, path: Path, extras: Extras) -> Outcome:
    outcome = Outcome()
    namespace: dict = {}
    with SignalWatch() as signals, doc:
        try:
            # Keep the script's globals until the probes have judged the run (at the
            # end of the `with`): runpy would free them, models and all, on return.
            namespace = runpy.run_path(str(path), run_name="__main__")
        except StopTraining:
            outcome.stopped = True
        except SystemExit as exc:
            outcome.code = _exit_code(exc.code)
        except (KeyboardInterrupt, Terminated) as exc:
            # Ctrl-C / SIGTERM: the step it cut never finished, as after a crash.
            doc.crashed = True
            outcome.signum = getattr(exc, "signum", None) or signals.signum or signal.SIGINT
            outcome.code = 128 + outcome.signum
            outcome.where = _user_line(exc)
        except Exception as exc:
            _print_user_traceback(exc)
            if extras.memory is not None and _is_oom(exc):
                extras.memory.at_oom()
            if not _raised_in_a_child(exc):  # mp.spawn's: the child explained it there
                explain(doc, exc)  # an out-of-memory, a backward through a freed graph
            outcome.code = 1
    if outcome.signum is None and signals.signum is not None:
        outcome.signum = signals.signum  # the script caught the interrupt and went on
    del namespace
    return outcome


def _report(
    doc: Doctor, outcome: Outcome, children: ChildWatch, extras: Extras, json_path: str | None
) -> None:
    if outcome.code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        name = signal.Signals(outcome.signum or signal.SIGINT).name
        print(f"trainwell doctor: the script was stopped by {name}{outcome.where}",
              file=sys.stderr)  # fmt: skip
    print(report_text(doc, outcome.stopped, children=children.summary(),
                      child_steps=children.steps), file=sys.stderr)  # fmt: skip
    extra: dict[str, Any] = {}
    if extras.overfit is not None:
        extra["overfit"] = verdict = extras.overfit.verdict()
        print(verdict["message"], file=sys.stderr)
    for line in _extra_files(extras, extra):
        print(line, file=sys.stderr)
    if children.results or children.unreported:
        extra["children"] = children.to_json()
    if outcome.signum is not None:
        extra["interrupted"] = signal.Signals(outcome.signum).name
    if json_path:
        text = to_json(
            doc.findings,
            steps=doc.steps + children.steps,
            stopped_early=outcome.stopped,
            exit_code=outcome.code,
            errors=doc.errors,
            **extra,
        )
        try:
            Path(json_path).write_text(text)
        except OSError as exc:  # the folder went away or the disk filled during the run
            raise UserError(f"doctor: --json: cannot write {json_path}: {exc.strerror}") from None


def _extra_files(extras: Extras, extra: dict[str, Any]) -> list[str]:
    """Write the memory series and the profile; the lines that say where they are."""
    lines: list[str] = []
    if extras.memory is not None:
        try:
            files = extras.memory.write()
        except OSError as exc:
            raise UserError(f"doctor: --memory: cannot write {extras.memory.out_dir}: "
                            f"{exc.strerror}") from None  # fmt: skip
        lines += extras.memory.summary_lines(files)
        extra["memory"] = {"files": [str(f) for f in files], "steps": len(extras.memory.rows)}
    if extras.profile is not None:
        lines += extras.profile.close()
        prof = extras.profile.profiler
        extra["profile"] = {"recorded_steps": prof.recorded, "note": prof.note,
                            "trace": str(prof.trace_path) if prof.ops else None}  # fmt: skip
    return lines


def _extras(
    overfit: bool, memory: bool, profile: bool, out_dir: str | None, json_path: str | None
) -> Extras:
    extras = Extras(overfit=OverfitCheck() if overfit else None)
    if not (memory or profile):
        if out_dir is not None:
            raise UserError("doctor: --out is for the files of --memory and --profile")
        return extras
    folder = _out_folder(out_dir, json_path)
    if memory:
        from trainwell.doctor.memory_series import MemorySeries

        extras.memory = MemorySeries(folder)
    if profile:
        from trainwell.doctor.memory_series import ScriptProfile

        extras.profile = ScriptProfile(folder / "profile")
    return extras


def _out_folder(out_dir: str | None, json_path: str | None) -> Path:
    """--out, else the folder of --json, else ./trainwell-doctor: checked before the run."""
    if out_dir is not None:
        folder = Path(out_dir)
    elif json_path:
        folder = Path(json_path).parent
    else:
        folder = Path("trainwell-doctor")
    if folder.exists() and not folder.is_dir():
        raise UserError(f"doctor: --out {folder} is a file; give a folder")
    check_output_dir(folder, "--out", OUT_FILES, verb="doctor")  # not a run's own files
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"doctor: --out {folder} cannot be made: {exc.strerror}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"doctor: --out {folder} cannot be written (permission denied)")
    return folder


def _exit_code(code: object) -> int:
    if isinstance(code, int):
        return code
    return 0 if code is None else 1


def _raised_in_a_child(exc: BaseException) -> bool:
    """mp.spawn's ProcessRaisedException / ProcessExitedException: the child's error,
    whose text quotes the child's traceback (the child's doctor explained it)."""
    spawn = sys.modules.get("torch.multiprocessing.spawn")
    kinds = tuple(getattr(spawn, n) for n in ("ProcessException",) if hasattr(spawn, n))
    return bool(kinds) and isinstance(exc, kinds)


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or any(m in str(exc) for m in OOM_MARKERS)


def _user_line(exc: BaseException) -> str:
    """`` at train.py:42``: the user's innermost line that was running (or nothing)."""
    tb, where = exc.__traceback__, ""
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            where = f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


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
        check_output(json_path, "--json", verb="doctor", inputs=[(path, "the script being run")])


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
