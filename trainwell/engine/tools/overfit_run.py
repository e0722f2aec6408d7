"""``doctor.overfit_batch=true``: the overfit-one-batch check in place of training.

Trains on the first batch of the training data for ``train.max_steps`` steps (else
:data:`~trainwell.engine.tools.overfit.DEFAULT_STEPS`) with the run's model, step function,
optimizer and schedule (sized to those steps); no validation, early stopping or
checkpoints. The run directory gets config.yaml, env.json, metrics.csv (the loss and the
lr), curves.png and a summary.json whose ``"overfit"`` holds the verdict.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from torch import nn

from trainwell.config import Config, check_warmup
from trainwell.doctor.crash import explain as explain_crash
from trainwell.doctor.findings import to_json as doctor_json
from trainwell.engine.build.optim import build_optimizer, build_scheduler, steps_per_eval
from trainwell.engine.build.preflight import label_checker
from trainwell.engine.distributed.placement import Placement, unwrap
from trainwell.engine.loading.loaders import TrainData
from trainwell.engine.run.result import FitResult
from trainwell.engine.run.run_files import open_run_dir
from trainwell.engine.run_dir.directory import RunDir, new_run_path
from trainwell.engine.step.precision import Precision, resolve_precision
from trainwell.engine.step.stepper import Stepper
from trainwell.engine.tools import overfit

if TYPE_CHECKING:
    from trainwell.doctor.frame import Doctor
    from trainwell.engine.build.parts import Parts


def overfit_run(
    cfg: Config,
    place: Placement,
    net: nn.Module,
    parts: Parts,
    data: TrainData,
    console: Console,
    doc: Doctor | None,
) -> FitResult:
    """Run the check, write its run directory, print the one-line verdict."""
    steps = cfg.train.max_steps or overfit.DEFAULT_STEPS
    check_warmup(cfg.sched.warmup_steps, steps)
    optimizer = build_optimizer(cfg.optim, unwrap(net))
    scheduler = build_scheduler(cfg.sched, optimizer, steps)
    precision = Precision.build(resolve_precision(cfg.train.precision, place.device), place.device)
    stepper = Stepper(net, parts.steps.train, optimizer, precision, cfg.train.grad_clip,
                      place.device)  # fmt: skip
    # The first global batch of epoch 0, exactly as training would draw it.
    micro_batches = next(data.epoch(0))
    check = label_checker(parts.task, parts.splits.train)
    if check is not None:
        for batch in micro_batches:
            check(batch)

    run = open_run_dir(cfg, new_run_path(cfg.run, parts.name), None, None, place)
    started = time.time()
    summary: dict[str, Any] = {
        "status": "running",
        "mode": "overfit_batch",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "device": str(place.device),
        "world_size": place.world_size,
        "precision": precision.name,
        "batch": {"global": cfg.data.batch_size, "grad_accum_steps": cfg.train.grad_accum_steps},
        "total_steps": steps,
    }
    run.write_summary(summary)
    console.print(
        f"[bold]trainwell[/] overfit check in [cyan]{run.path}[/]: {steps} steps on one batch "
        f"of {cfg.data.batch_size}, {cfg.optim.name} lr {cfg.optim.lr:g}, {precision.name} on "
        f"{place.device}",
        highlight=False,
    )
    lrs = _LrRecorder(scheduler, optimizer)
    try:
        result = overfit.overfit_one_batch(stepper, micro_batches, lrs, steps, place)
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        if doc is not None and not interrupted:
            explain_crash(doc, exc)
        summary.update(
            status="interrupted" if interrupted else "failed",
            error=f"{type(exc).__name__}: {exc}",
        )
        _write_doctor(run, doc)
        run.write_summary(summary)
        raise
    _log(run, cfg, result, lrs.lrs, steps)
    _write_doctor(run, doc)
    summary.update(status="completed", steps=steps, overfit=result.to_dict(),
                   wall_time_s=round(time.time() - started, 3))  # fmt: skip
    try:
        run.plot_curves()
    except Exception as exc:  # a plot must never lose the check's summary
        summary["curves_error"] = f"{type(exc).__name__}: {exc}"
    # Written last: "completed" appears only once everything else is on disk.
    run.write_summary(summary)
    console.print(
        f"  initial loss {result.initial_loss:.4g}   final loss {result.final_loss:.4g}   "
        f"ratio {result.ratio:.3g}   ({summary['wall_time_s']:.1f}s)",
        highlight=False,
    )
    # One line, unwrapped: scripts and CI logs grep for it.
    style = "green" if result.passed else "red"
    console.print(result.verdict(), style=style, highlight=False, markup=False, soft_wrap=True)
    console.print(f"run directory: {run.path}", highlight=False)
    metrics = {"overfit/initial_loss": result.initial_loss, "overfit/final_loss": result.final_loss}
    return FitResult(run_dir=run.path, metrics=metrics, summary=summary, model=unwrap(net))


class _LrRecorder:
    """The scheduler, stepped as usual, noting the lr each step was taken with."""

    def __init__(self, scheduler: Any, optimizer: Any) -> None:
        self.scheduler, self.optimizer = scheduler, optimizer
        self.lrs = [optimizer.param_groups[0]["lr"]]

    def step(self) -> None:
        if not steps_per_eval(self.scheduler):  # ReduceLROnPlateau waits for evaluations
            self.scheduler.step()
        self.lrs.append(self.optimizer.param_groups[0]["lr"])


def _log(run: RunDir, cfg: Config, result: overfit.OverfitResult, lrs: list, steps: int) -> None:
    for i, loss in enumerate(result.losses):
        step = i + 1
        if step % cfg.train.log_every == 0 or step in (1, steps):
            run.log(step, 0, "train", "loss", loss)
            run.log(step, 0, "train", "lr", lrs[i])
    run.flush()


def _write_doctor(run: RunDir, doc: Doctor | None) -> None:
    if doc is not None:
        run.write_text("doctor.json", doctor_json(doc.findings, steps=doc.steps, errors=doc.errors))
