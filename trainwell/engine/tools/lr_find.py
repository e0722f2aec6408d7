"""The learning-rate range test (Leslie Smith, 2015), as fastai's and Lightning's ``lr_find``.

The run's own model, data, loss and optimizer are built as ``trainwell train`` builds them
(:func:`~trainwell.engine.build.parts.build_parts`, the same seed and so the same initial
weights), then trained for a short while as the learning rate rises exponentially from
``start_lr`` to ``end_lr``, one value per optimizer step. The loss is smoothed with an
exponential moving average (bias-corrected, as Adam's moments are), and the run stops
once the loss diverges: not finite, the smoothed loss past four times its best, or the
loss back up by half of its fall (a clipped classifier returns to the majority-class
loss rather than exploding). Beyond that point the weights are ruined and the curve says
nothing more. The rules are in :mod:`trainwell.engine.tools.lr_curve`.

The suggested lr is where the loss falls fastest against log10(lr), looked for before
the minimum of the smoothed loss only (never past it; with too few points before
it, a tenth of the minimum's lr, as fastai's ``lr_min / 10``): low enough to be stable,
high enough to learn fast. The lr with the lowest loss is shown too; it is already near
the edge of divergence, so train below it.

Nothing of the trained weights is kept, no checkpoint is read or written, and ``run.dir``
is never touched: the outputs (``lr_find.csv``, ``lr_find.png``) go to their own folder.
"""

from __future__ import annotations

import copy
import csv
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from torch import nn
from torch.utils.data import Dataset

from trainwell.config import Config, load_config
from trainwell.engine.build.optim import build_optimizer
from trainwell.engine.build.parts import Given, build_parts
from trainwell.engine.build.preflight import label_checker
from trainwell.engine.distributed.placement import Placement, resolve_device
from trainwell.engine.loading.loaders import TrainData
from trainwell.engine.loop.progress import make_console
from trainwell.engine.run_dir.directory import RunConfig, new_run_path
from trainwell.engine.step.precision import Precision, resolve_precision
from trainwell.engine.step.step_fn import LossFn, StepFn
from trainwell.engine.step.stepper import Stepper
from trainwell.engine.tools.lr_curve import (
    DIVERGE_FACTOR,
    SKIP_END,
    SMOOTHING,
    suggest_lr,
)
from trainwell.engine.tools.lr_curve import (
    stop_reason as curve_stop,
)
from trainwell.errors import UserError

# The curve's rules (stop, suggestion) and constants live in lr_curve, unit-tested there.
__all__ = ["DIVERGE_FACTOR", "SMOOTHING", "LRFindResult", "lr_find", "suggest_lr"]


@dataclass
class LRFindResult:
    """What :func:`lr_find` returns: the curve, the suggestion and where they were written.

    Attributes:
        lrs, losses, smoothed: per optimizer step taken, the lr, the step's loss and the
            smoothed loss.
        suggestion: the lr where the loss falls fastest before the smoothed minimum
            (a tenth of the minimum's lr with too few points before it), or ``None`` when
            it never falls by more than its noise (or too few steps ran).
        min_loss_lr: the lr of the lowest smoothed loss (``None`` if none was finite).
        stop_reason: ``"end_lr reached"``, ``"diverged"`` (4x the best),
            ``"loss rose back"`` (half of the fall given back) or ``"non-finite loss"``.
        steps: the steps asked for (``len(lrs)`` were taken).
        output: the folder holding ``lr_find.csv`` and ``lr_find.png``.
        seconds: wall time of the test.
    """

    lrs: list[float]
    losses: list[float]
    smoothed: list[float]
    suggestion: float | None
    min_loss_lr: float | None
    stop_reason: str
    steps: int
    output: Path | None = None
    seconds: float = 0.0

    def write_csv(self, path: Path) -> None:
        """``lr,loss,smoothed``: one row per step taken (written atomically)."""
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["lr", "loss", "smoothed"])
            writer.writerows(zip(self.lrs, self.losses, self.smoothed))
        os.replace(tmp, path)

    def plot(self, path: Path) -> None:
        """Loss against lr on a log axis, with the suggestion marked."""
        import matplotlib

        matplotlib.use("Agg")  # no display needed; safe in CI and on servers
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.plot(self.lrs, self.losses, color="0.75", linewidth=1, label="loss")
        ax.plot(self.lrs, self.smoothed, color="C0", linewidth=2, label="smoothed loss")
        finite = [s for s in self.smoothed if math.isfinite(s)]
        if finite:
            # The divergence at the end would flatten the interesting part of the curve.
            low, high = min(finite), max(finite[: len(finite) - SKIP_END] or finite)
            pad = 0.05 * (high - low) or 0.05 * abs(high) or 0.1
            ax.set_ylim(low - pad, high + pad)
        if self.suggestion is not None and self.suggestion in self.lrs:
            at = self.lrs.index(self.suggestion)
            ax.plot([self.suggestion], [self.smoothed[at]], "o", color="C3", markersize=9,
                    label=f"suggested lr {self.suggestion:.2g}")  # fmt: skip
        elif self.suggestion is not None:
            ax.axvline(self.suggestion, color="C3", label=f"suggested lr {self.suggestion:.2g}")
        if self.min_loss_lr is not None:
            ax.axvline(self.min_loss_lr, color="0.5", linestyle=":",
                       label=f"min-loss lr {self.min_loss_lr:.2g}")  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("learning rate (log scale)")
        ax.set_ylabel("training loss")
        ax.set_title(f"learning-rate range test ({len(self.lrs)} steps, {self.stop_reason})")
        ax.legend()
        fig.tight_layout()
        tmp = path.with_name(f".{path.name}.tmp")
        fig.savefig(tmp, dpi=100, format="png")
        plt.close(fig)
        os.replace(tmp, path)


def lr_find(
    config: Config | str | Path | None = None,
    *,
    model: nn.Module | None = None,
    train_data: Dataset | None = None,
    loss_fn: LossFn | None = None,
    step_fn: StepFn | None = None,
    start_lr: float = 1e-7,
    end_lr: float = 10.0,
    steps: int = 100,
    output: str | Path | None = None,
    smoothing: float = SMOOTHING,
    console: Console | None = None,
) -> LRFindResult:
    """Run the learning-rate range test on the run the config describes; suggest ``optim.lr``.

    Args:
        config: a :class:`~trainwell.config.Config`, a YAML path, or ``None`` for defaults.
            Its model, data, loss, optimizer (name, weight decay, betas, ...), precision,
            accumulation and clipping are used; ``optim.lr`` and the schedule are replaced
            by the rising lr.
        model, train_data, loss_fn, step_fn: objects instead of the config's choices, as
            in :func:`trainwell.fit`; a model passed in is copied and left untouched.
        start_lr, end_lr: the range of the lr, ``0 < start_lr < end_lr``.
        steps: optimizer steps from ``start_lr`` to ``end_lr`` (at least 2); fewer run
            when the loss diverges.
        output: the folder for ``lr_find.csv`` and ``lr_find.png`` (default: a new
            ``runs/<timestamp>-lr_find-<data>-<model>``; never ``run.dir``).
        smoothing: weight of the past in the loss's moving average, in [0, 1); the
            average lags the loss by about ``smoothing / (1 - smoothing)`` steps.
        console: where the summary goes (default: standard output).

    Returns:
        An :class:`LRFindResult`; ``result.suggestion`` is the lr to try.

    Raises:
        UserError: a bad range or step count (one line), or any bad config.

    Example:
        >>> import trainwell
        >>> from trainwell.engine.tools.lr_find import lr_find
        >>> cfg = trainwell.load_config(overrides=["data.name=synthetic", "model.name=mlp"])
        >>> result = lr_find(cfg, start_lr=1e-6, end_lr=1.0, steps=50)  # doctest: +SKIP
        >>> cfg.optim.lr = result.suggestion  # doctest: +SKIP
    """
    _check_range(start_lr, end_lr, steps)
    if not 0 <= smoothing < 1:
        raise UserError(f"lr-find: smoothing must be in [0, 1); got {smoothing:g}")
    cfg = config if isinstance(config, Config) else load_config(config)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UserError("lr-find runs in one process; start it without torchrun or --nproc")
    console = console or make_console()
    place = Placement(device=resolve_device(cfg.run.device))
    if model is not None:
        model = copy.deepcopy(model)  # the caller's weights stay as they were

    parts = build_parts(cfg, place, Given(model, train_data, loss_fn=loss_fn, step_fn=step_fn))
    data = TrainData.build(parts.splits.train, parts.loaders, place)
    optimizer = build_optimizer(cfg.optim, parts.model)
    precision = Precision.build(resolve_precision(cfg.train.precision, place.device), place.device)
    stepper = Stepper(parts.model, parts.steps.train, optimizer, precision, cfg.train.grad_clip,
                      place.device)  # fmt: skip
    name = cfg.run.name or parts.name
    console.print(
        f"[bold]trainwell lr-find[/]: {name}, {cfg.optim.name}, batch {cfg.data.batch_size}, "
        f"{precision.name} on {place.device}; lr {start_lr:g} -> {end_lr:g} over {steps} steps",
        highlight=False,
        soft_wrap=True,
    )
    started = time.time()
    batches = stepper.batches(data, label_checker(parts.task, parts.splits.train), "lr-find")
    lrs: list[float] = []
    losses: list[float] = []
    smoothed: list[float] = []
    average = 0.0
    stop_reason = "end_lr reached"
    parts.model.train()
    for i in range(steps):
        lr = start_lr * (end_lr / start_lr) ** (i / (steps - 1))
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss_t = stepper(next(batches))
        # A sync every step: whether to stop depends on this very loss. The test is a
        # hundred steps long, so the cost is negligible.
        loss = float(loss_t)
        average = smoothing * average + (1 - smoothing) * loss
        smooth = average / (1 - smoothing ** (i + 1))  # bias correction, as in Adam
        lrs.append(lr)
        losses.append(loss)
        smoothed.append(smooth)
        stopped = curve_stop(losses, smoothed)
        if stopped is not None:
            stop_reason = stopped
            break

    suggestion = suggest_lr(lrs, smoothed, losses=losses)
    finite = [(s, lr) for lr, s in zip(lrs, smoothed) if math.isfinite(s)]
    result = LRFindResult(
        lrs=lrs,
        losses=losses,
        smoothed=smoothed,
        suggestion=suggestion,
        min_loss_lr=min(finite)[1] if finite else None,
        stop_reason=stop_reason,
        steps=steps,
        seconds=time.time() - started,
    )
    # The folder is made only now: bad input or a crash leaves no folder behind.
    out = Path(output) if output is not None else new_run_path(RunConfig(), f"lr_find-{name}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--output: cannot create {out}: {exc.strerror}") from None
    result.output = out
    result.write_csv(out / "lr_find.csv")
    result.plot(out / "lr_find.png")
    _report(console, result, end_lr)
    return result


def _check_range(start_lr: float, end_lr: float, steps: int) -> None:
    for flag, value in (("--start-lr", start_lr), ("--end-lr", end_lr)):
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"lr-find: {flag} must be a positive number; got {value:g}")
    if start_lr >= end_lr:
        raise UserError(f"lr-find: --start-lr ({start_lr:g}) must be below --end-lr ({end_lr:g})")
    if steps < 2:
        raise UserError(f"lr-find: --steps must be at least 2; got {steps}")


def _report(console: Console, result: LRFindResult, end_lr: float) -> None:
    taken = len(result.lrs)
    if result.stop_reason == "end_lr reached":
        stopped = f"all {taken} steps, up to lr {end_lr:g}"
    elif result.stop_reason == "diverged":
        stopped = (
            f"step {taken} of {result.steps}: the smoothed loss passed {DIVERGE_FACTOR:g}x its "
            f"best at lr {result.lrs[-1]:.2g} (diverged)"
        )
    elif result.stop_reason == "loss rose back":
        stopped = (
            f"step {taken} of {result.steps}: the loss gave back half of its fall at lr "
            f"{result.lrs[-1]:.2g} (diverged: a classifier's loss climbs back to the "
            "majority-class level rather than exploding)"
        )
    else:
        stopped = (
            f"step {taken} of {result.steps}: the loss became NaN/Inf at lr {result.lrs[-1]:.2g}"
        )
    rows = [("stopped at", stopped)]
    if result.suggestion is not None:
        at = result.lrs.index(result.suggestion)
        rows.append(("suggested lr", f"{result.suggestion:.2g}   the loss falls fastest "
                     f"here, before its minimum (smoothed {result.smoothed[at]:.4g})"
                     if result.suggestion in result.lrs else f"{result.suggestion:.2g}   a "
                     "tenth of the min-loss lr (too few points before the minimum)"))  # fmt: skip
    else:
        rows.append(("suggested lr", "none: the smoothed loss never fell; widen the range "
                     "(a lower --start-lr, a higher --end-lr) or more --steps"))  # fmt: skip
    if result.min_loss_lr is not None:
        best = min(s for s in result.smoothed if math.isfinite(s))
        rows.append(("min-loss lr", f"{result.min_loss_lr:.2g}   lowest smoothed loss "
                     f"({best:.4g}); already close to diverging, so train below it"))  # fmt: skip
    if result.suggestion is not None:
        rows.append(("override", f"optim.lr={result.suggestion:.2g}"))
    if result.output is not None:
        rows.append(("wrote", f"{result.output / 'lr_find.csv'}, {result.output / 'lr_find.png'}"))
    rows.append(("time", f"{result.seconds:.1f}s"))
    for label, text in rows:
        console.print(f"  {label:<13} {text}", highlight=False, markup=False, soft_wrap=True)
