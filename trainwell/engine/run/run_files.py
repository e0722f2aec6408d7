"""The run directory's beginning and end: opened or reopened by rank 0, summed up at the end.

``summary.json`` says ``running`` from the start and ``completed`` only once everything
else is on disk, so a run that dies never looks complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainwell import config as config_mod
from trainwell.config import Config
from trainwell.doctor.findings import to_json as doctor_json
from trainwell.engine.checkpointing.resume import remove_stale_temporaries
from trainwell.engine.distributed.placement import Placement, broadcast_object
from trainwell.engine.run_dir.directory import CsvLogger, NullRunDir, RunDir
from trainwell.engine.run_dir.run_lock import RunLock
from trainwell.engine.state.signals import foreign
from trainwell.errors import UserError
from trainwell.loggers import Loggers, build_loggers
from trainwell.report import write_run_report

if TYPE_CHECKING:
    from trainwell.doctor.frame import Doctor
    from trainwell.engine.loop.assembly import Assembly
    from trainwell.engine.loop.progress import Progress
    from trainwell.engine.loop.trainer import Trainer
    from trainwell.engine.state.loop_state import LoopState


def open_run_dir(
    cfg: Config,
    path: Path,
    resume: str | Path | None,
    resumed: tuple[Path, dict[str, Any]] | None,
    place: Placement,
) -> RunDir:
    """Rank 0 locks and creates or reopens the run directory; other ranks get a
    :class:`NullRunDir`.

    A refusal (the folder holds a completed run, another process holds it, a checkpoint of
    another run would overwrite it) reaches every rank, so none hangs.
    """
    # Without run.dir, rank 0's timestamped path is everyone's.
    path = broadcast_object(path, place)
    run: RunDir = NullRunDir(path)
    error = None
    lock = None
    if place.is_main:
        try:
            _refuse_foreign(path, resume, resumed)
            lock = RunLock.acquire(path)
            if resume is None:
                run = RunDir.create(path)
            else:
                # Resuming, or --resume auto with nothing to resume (a first launch, a
                # job killed before its first checkpoint): continue in that directory.
                remove_stale_temporaries(path)
                keep = int(resumed[1].get("log_rows", 0)) if resumed else 0
                run = RunDir.reopen(path, keep_rows=keep)
            run.write_text("config.yaml", config_mod.to_yaml(cfg))
            from trainwell import env

            run.write_text("env.json", env.to_json(env.collect()))
            run.lock = lock
        except UserError as exc:
            error = str(exc)
            if lock is not None:
                lock.release()
            if not isinstance(run, NullRunDir):  # the folder is ours: it says why it stopped
                with contextlib.suppress(UserError):
                    run.write_summary({"status": "failed", "error": error})
    error = broadcast_object(error, place)
    if error:
        raise UserError(error)
    return run


def _refuse_foreign(
    path: Path, resume: str | Path | None, resumed: tuple[Path, dict[str, Any]] | None
) -> None:
    """A checkpoint of one run is never resumed into the folder of another run."""
    if resumed is None or str(resume) == "auto" or not (path / "summary.json").exists():
        return
    if resumed[0].resolve().parent == (path / "checkpoints").resolve():
        return  # its own run
    raise UserError(
        f"run.dir: {path} holds another run; resuming {resumed[0]} there would overwrite it. "
        "Leave run.dir unset to continue that checkpoint's own run, or choose a new run.dir"
    )


def resume_command(cfg: Config, path: Path) -> str:
    """The command that continues this run, launcher flags included on several processes."""
    launcher = ""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        launcher = f" --nproc {local}"
        if world > local:
            nodes = world // local
            launcher += f" --nnodes {nodes} --node-rank RANK --master-addr HOST"
    return f"trainwell train{launcher} --config {path / 'config.yaml'} run.dir={path} --resume auto"


def discard_unstarted(path: Path) -> None:
    """Remove a run directory the launcher made for workers that stopped before the run
    began (bad input refused up front, e.g. a monitor that names no metric): left there,
    it would look like a run. Anything a worker wrote (a summary, a checkpoint, a metric
    row) keeps it."""
    entries = {p.name for p in path.iterdir()} if path.is_dir() else {"?"}
    if entries - {"checkpoints", "metrics.csv", ".lock"}:
        return
    checkpoints = path / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        return
    metrics = path / "metrics.csv"
    if metrics.exists() and len(metrics.read_text().splitlines()) > 1:
        return
    for name in ("metrics.csv", ".lock"):
        (path / name).unlink(missing_ok=True)
    if checkpoints.is_dir():
        checkpoints.rmdir()
    path.rmdir()


def mark_failed(path: Path, cause: str) -> None:
    """A run whose processes died without a word (a killed worker): say so in its summary.

    Only a summary still saying ``running`` changes; one a worker wrote stays.
    """
    summary = path / "summary.json"
    try:
        data = json.loads(summary.read_text())
    except (OSError, ValueError):
        return
    if isinstance(data, dict) and data.get("status") == "running":
        data.update(status="failed", error=cause)
        RunDir(path).write_summary(data)
        write_run_report(path)


def start_summary(trainer: Assembly, resumed_from: Path | None) -> dict[str, Any]:
    """``summary.json`` as the run starts: status ``running`` and the run's plan."""
    cfg, data = trainer.cfg, trainer.data
    return {
        "status": "running",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "resumed_from": str(resumed_from) if resumed_from else None,
        "device": str(trainer.place.device),
        "world_size": trainer.place.world_size,
        "precision": trainer.stepper.precision.name,
        "monitor": trainer.monitor,
        "batch": {
            "global": cfg.data.batch_size if data.owned else None,
            "micro": data.micro_batch,
            "grad_accum_steps": cfg.train.grad_accum_steps,
        },
        "steps_per_epoch": data.steps_per_epoch,
        "total_steps": trainer.total_steps,
    }


def run_loggers(
    run: RunDir, progress: Progress, loop: LoopState, say: Callable[[str], None]
) -> Loggers:
    """The loggers every run has, on every rank: metrics.csv and the progress display
    (essential: one that fails stops the run); :func:`start_loggers` adds the others."""
    named: list[tuple[str, Any]] = [
        ("csv", CsvLogger(run, epoch=lambda: loop.epoch)),
        ("progress", progress),
    ]
    return Loggers(named, say=say, essential=("csv", "progress"))


def start_loggers(
    loggers: Loggers,
    cfg: Config,
    place: Placement,
    run: RunDir,
    loop: LoopState,
    resumed: tuple[Path, dict[str, Any]] | None,
) -> None:
    """Add, on rank 0, those ``log.*`` asks for, continuing a resumed run's own logs; the
    config goes to each.

    A logger that cannot start (a tracking store that does not open, a user logger that
    raises) stops the run here, on every rank, before the first step; a signal while a
    store stalls stops it as any signal does.
    """
    error = None
    if place.is_main:
        saved = resumed[1].get("loggers") if resumed else None
        try:
            with foreign("starting the loggers"):  # a tracking store that does not answer
                loggers.add(build_loggers(cfg.log, run.path, saved, loop.step, run.rows))
        except UserError as exc:
            error = str(exc)
        except Exception as exc:  # the store's own errors: one line, not a traceback
            detail = " ".join(str(exc).split())[:300]
            error = f"log: a logger could not start ({type(exc).__name__}: {detail})"
    error = broadcast_object(error, place)
    if error:
        raise UserError(error)
    loggers.log_config(config_mod.to_dict(cfg))


def finish(
    run: RunDir,
    summary: dict[str, Any],
    status: str,
    trainer: Trainer,
    started: float,
    doc: Doctor | None,
) -> None:
    """Flush the metrics, write doctor.json, the curves, the summary, then report.html
    (drawn from the files) and the files to the loggers that keep artifacts.

    Each write is tried on its own (a disk gone read-only fails the first, not the
    summary's chance to say ``failed``); the first error is raised after the summary.
    """
    errors: list[UserError] = []
    if status != "completed":
        # A run that stops says so first: whatever fills the disk after (doctor.json, the
        # curves) must not leave it saying "running".
        with _collected(errors):
            run.write_summary({**summary, "status": status})
    with _collected(errors):
        run.flush()
    if doc is not None:
        # The probes that judge the whole run speak first, so doctor.json holds their
        # findings too (the `with doc` around the run would call end() only after this).
        doc.end()
        with _collected(errors):
            run.write_text(
                "doctor.json", doctor_json(doc.findings, steps=doc.steps, errors=doc.errors)
            )
    loop, train_time = trainer.loop, trainer.train_time
    summary.update(
        status="failed" if errors and status == "completed" else status,
        steps=loop.step,
        final=dict(loop.metrics),
        best=loop.best or None,
        test={k.split("/", 1)[1]: v for k, v in loop.metrics.items() if k.startswith("test/")}
        or None,
        wall_time_s=round(time.time() - started, 3),
        train_time_s=round(train_time, 3),
        samples_per_s=round(trainer.samples / train_time, 1) if train_time > 0 else None,
        time_shares=trainer.clock.shares() or None,
        compile_s=trainer.compile_s,
    )
    if errors:
        summary.setdefault("error", str(errors[0]))
    if run.rows:
        try:
            run.plot_curves()
        except Exception as exc:  # a plot must never lose a finished run's summary
            summary["curves_error"] = f"{type(exc).__name__}: {exc}"
    # Written last: "completed" appears only once everything else is on disk.
    with _collected(errors):
        run.write_summary(summary)
    if not isinstance(run, NullRunDir):
        write_run_report(run.path)  # never raises: a report that fails to draw is one line
    _close_loggers(trainer.loggers, run, summary["status"])
    if run.lock is not None:
        run.lock.release()
    if errors:
        raise errors[0]


def _close_loggers(loggers: Loggers, run: RunDir, status: str) -> None:
    """The run's files (not its checkpoints) to the loggers that keep artifacts; close."""
    if not isinstance(run, NullRunDir):
        for path in sorted(run.path.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                loggers.log_artifact(path)
    loggers.close(status)


@contextlib.contextmanager
def _collected(errors: list[UserError]) -> Iterator[None]:
    try:
        yield
    except UserError as exc:
        errors.append(exc)
