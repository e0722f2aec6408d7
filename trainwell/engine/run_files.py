"""The run directory's beginning and end: opened or reopened by rank 0, summed up at the end.

``summary.json`` says ``running`` from the start and ``completed`` only once everything
else is on disk, so a run that dies never looks complete.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainwell import config as config_mod
from trainwell.config import Config
from trainwell.doctor.findings import to_json as doctor_json
from trainwell.engine.distributed import Placement, broadcast_object
from trainwell.engine.resume import remove_stale_temporaries
from trainwell.engine.rundir import NullRunDir, RunDir
from trainwell.errors import UserError

if TYPE_CHECKING:
    from trainwell.doctor.frame import Doctor
    from trainwell.engine.trainer import Trainer


def open_run_dir(
    cfg: Config,
    path: Path,
    resume: str | Path | None,
    resumed: tuple[Path, dict[str, Any]] | None,
    place: Placement,
) -> RunDir:
    """Rank 0 creates or reopens the run directory; other ranks get a :class:`NullRunDir`.

    A refusal (the folder holds a completed run) reaches every rank, so none hangs.
    """
    # Without run.dir, rank 0's timestamped path is everyone's.
    path = broadcast_object(path, place)
    run: RunDir = NullRunDir(path)
    error = None
    if place.is_main:
        try:
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
        except UserError as exc:
            error = str(exc)
    error = broadcast_object(error, place)
    if error:
        raise UserError(error)
    return run


def start_summary(trainer: Trainer, resumed_from: Path | None) -> dict[str, Any]:
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


def finish(
    run: RunDir,
    summary: dict[str, Any],
    status: str,
    trainer: Trainer,
    started: float,
    doc: Doctor | None,
) -> None:
    """Flush the metrics, write doctor.json, the curves, and the summary last."""
    run.flush()
    if doc is not None:
        run.write_text("doctor.json", doctor_json(doc.findings, steps=doc.steps, errors=doc.errors))
    loop, train_time = trainer.loop, trainer.train_time
    summary.update(
        status=status,
        steps=loop.step,
        final=dict(loop.metrics),
        best=loop.best or None,
        test={k.split("/", 1)[1]: v for k, v in loop.metrics.items() if k.startswith("test/")}
        or None,
        wall_time_s=round(time.time() - started, 3),
        train_time_s=round(train_time, 3),
        samples_per_s=round(trainer.samples / train_time, 1) if train_time > 0 else None,
    )
    if run.rows:
        try:
            run.plot_curves()
        except Exception as exc:  # a plot must never lose a finished run's summary
            summary["curves_error"] = f"{type(exc).__name__}: {exc}"
    # Written last: "completed" appears only once everything else is on disk.
    run.write_summary(summary)
