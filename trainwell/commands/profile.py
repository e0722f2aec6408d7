"""``trainwell profile``: ``torch.profiler`` over a few training steps of a config's run.

The run is built as ``trainwell train`` builds it (the engine's
:func:`~trainwell.engine.build.parts.build_parts`, loaders, optimizer, schedule, precision and
:class:`~trainwell.engine.step.stepper.Stepper`, so the same seed gives the same model and
batches), then trains ``--warmup`` steps untouched and ``--steps`` steps under a
:class:`~trainwell.engine.tools.profiling.StepProfiler`. Nothing of the run is kept: no
checkpoint, no metrics, and ``run.dir`` is never touched; the trace and the operator
table go to their own folder.

The doctor stays off: its hooks would show in the trace as time the run itself does not
spend (``trainwell train`` with ``train.profile=true`` profiles a run as it is).
"""

from __future__ import annotations

import argparse
import itertools
import os
from pathlib import Path
from typing import TYPE_CHECKING

from trainwell.commands.common import Subparsers, add_config, add_debug, add_overrides, load_config
from trainwell.errors import UserError

if TYPE_CHECKING:
    from rich.console import Console

    from trainwell.config import Config
    from trainwell.engine.loading.loaders import TrainData
    from trainwell.engine.tools.profiling import OpStat, StepProfiler

# A module path deeper than this is shown by its innermost parts (the CSV keeps it whole).
_SHOWN_MODULES = 2


def register(sub: Subparsers) -> None:
    """Add the ``profile`` verb."""
    profile = sub.add_parser(
        "profile",
        help="torch.profiler trace and top operators of a few training steps",
        description="Build the run as `trainwell train` would (same --config and KEY=VALUE "
        "overrides), train --warmup steps, then profile --steps steps with torch.profiler "
        "(CPU, and CUDA on a GPU; memory and shapes). Writes trace.json (open in "
        "https://ui.perfetto.dev or chrome://tracing) and profile_ops.csv (every operator "
        "with its module, by self time), and prints the five heaviest. No checkpoint, the "
        "doctor off, and run.dir is never touched.",
    )
    add_config(profile)
    profile.add_argument(
        "--steps", type=int, default=5, metavar="N", help="optimizer steps profiled (default 5)"
    )
    profile.add_argument(
        "--warmup",
        type=int,
        default=3,
        metavar="W",
        help="optimizer steps trained first, not profiled (default 3): allocator growth "
        "and autotuning are not the steady state",
    )
    profile.add_argument(
        "--out",
        metavar="DIR",
        help="folder for trace.json and profile_ops.csv (default: a new one under runs/)",
    )
    add_debug(profile)
    add_overrides(profile)
    profile.set_defaults(handler=_profile)


def _profile(args: argparse.Namespace) -> int:
    from trainwell.engine.loop.progress import make_console

    # Checked before the config is loaded and the data built: a typo costs nothing.
    if args.steps < 1:
        raise UserError(f"profile: --steps must be at least 1; got {args.steps}")
    if args.warmup < 0:
        raise UserError(f"profile: --warmup must be 0 or more; got {args.warmup}")
    if args.out:
        from trainwell.outputs import check_output_dir

        check_output_dir(args.out, "--out", ("trace.json", "profile_ops.csv"), verb="profile",
                         inputs=[(args.config, "the config being read")])  # fmt: skip
    cfg = load_config(args)
    console = make_console()
    if not console.is_terminal:
        # Logs and pipes have no width: rich would squeeze the table into 80 columns.
        console.width = max(console.width, 120)
    out = Path(args.out) if args.out else None
    profiler = profile_run(cfg, steps=args.steps, warmup=args.warmup, out=out, console=console)
    _report(console, profiler)
    return 0


def profile_run(
    cfg: Config,
    *,
    steps: int = 5,
    warmup: int = 3,
    out: Path | None = None,
    console: Console | None = None,
) -> StepProfiler:
    """Train ``warmup + steps`` optimizer steps of the config's run, the last ``steps``
    profiled; returns the closed :class:`~trainwell.engine.tools.profiling.StepProfiler`.

    ``out`` defaults to a new ``runs/<timestamp>-profile-<data>-<model>``, made only
    once there is something to write (bad input leaves no folder).

    Example:
        >>> from trainwell.config import load_config
        >>> cfg = load_config(overrides=["data.name=synthetic", "model.name=mlp"])
        >>> prof = profile_run(cfg, steps=2, warmup=1)  # doctest: +SKIP
        >>> prof.heaviest(1)[0].name  # doctest: +SKIP
        'aten::addmm'
    """
    from trainwell.engine.build.optim import build_optimizer, build_scheduler, steps_per_eval
    from trainwell.engine.build.parts import build_parts
    from trainwell.engine.build.preflight import label_checker
    from trainwell.engine.distributed.placement import Placement, resolve_device
    from trainwell.engine.loading.loaders import TrainData
    from trainwell.engine.loop.progress import make_console
    from trainwell.engine.run_dir.directory import RunConfig, new_run_path
    from trainwell.engine.state.metrics import MetricSums
    from trainwell.engine.step.precision import Precision, resolve_precision
    from trainwell.engine.step.stepper import Stepper
    from trainwell.engine.tools.profiling import StepProfiler

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UserError("profile runs in one process; start it without torchrun or --nproc")
    console = console or make_console()
    place = Placement(device=resolve_device(cfg.run.device))
    parts = build_parts(cfg, place)
    data = TrainData.build(parts.splits.train, parts.loaders, place)
    optimizer = build_optimizer(cfg.optim, parts.model)
    scheduler = build_scheduler(cfg.sched, optimizer, _schedule_length(cfg, data, warmup + steps))
    # ReduceLROnPlateau steps after evaluations, which a profile has none of.
    step_scheduler = not steps_per_eval(scheduler)
    precision = Precision.build(resolve_precision(cfg.train.precision, place.device), place.device)
    stepper = Stepper(parts.model, parts.steps.train, optimizer, precision, cfg.train.grad_clip,
                      place.device)  # fmt: skip
    name = cfg.run.name or parts.name
    out = out if out is not None else new_run_path(RunConfig(), f"profile-{name}")
    console.print(
        f"[bold]trainwell profile[/]: {name}, batch {cfg.data.batch_size}, {precision.name} on "
        f"{place.device}; {warmup} warm-up + {steps} profiled steps",
        highlight=False,
        soft_wrap=True,
    )
    # As in training: the running sums of the step's metrics are part of a step's cost.
    sums = MetricSums(place.device)
    parts.model.train()
    batches = stepper.batches(data, label_checker(parts.task, parts.splits.train), "profile")
    with StepProfiler(out, warmup=warmup, active=steps, device=place.device) as profiler:
        for micro_batches in itertools.islice(batches, warmup + steps):
            stepper(micro_batches, sums)
            if step_scheduler:
                scheduler.step()
            profiler.step()
    return profiler


def _schedule_length(cfg: Config, data: TrainData, needed: int) -> int:
    """The training's optimizer steps, as the schedule of ``trainwell train`` gets them;
    never fewer than the profile takes (OneCycleLR refuses to step past its end)."""
    total = needed
    if data.steps_per_epoch is not None:
        total = cfg.train.epochs * data.steps_per_epoch
    if cfg.train.max_steps:
        total = min(total, cfg.train.max_steps) if data.steps_per_epoch else cfg.train.max_steps
    return max(total, needed)


def _report(console: Console, profiler: StepProfiler) -> None:
    from rich.table import Table

    if not profiler.ops:
        console.print(profiler.note or "profiler: nothing recorded", highlight=False)
        return
    clock = "CUDA" if profiler.on_cuda else "CPU"
    table = Table(
        title=f"five heaviest operators: self {clock} time over {profiler.recorded} steps",
        title_justify="left",
    )
    table.add_column("operator", no_wrap=True, max_width=32)
    table.add_column("module", no_wrap=True, max_width=40)
    for header in ("self ms", "share", "calls", "memory MB"):
        table.add_column(header, justify="right", no_wrap=True, min_width=len(header))
    total = sum(profiler.self_ms(op) for op in profiler.ops) or 1.0
    for op in profiler.heaviest():
        ms = profiler.self_ms(op)
        table.add_row(op.name, _short_module(op), f"{ms:.2f}", f"{100 * ms / total:.1f}%",
                      str(op.calls), f"{profiler.memory_mb(op):.2f}")  # fmt: skip
    console.print(table)
    console.print(f"trace: {profiler.trace_path}  ({_viewer()})", highlight=False, soft_wrap=True)
    console.print(
        f"operators: {profiler.ops_path} (every operator by self time; memory_rank orders "
        "them by memory)",
        highlight=False,
        soft_wrap=True,
    )


def _short_module(op: OpStat) -> str:
    """``Sequential_0/Linear_1``, or ``…/Block_3/Linear_1`` for a deep one; ``-`` if none.

    A ``record_function`` range (``Optimizer.step#AdamW.step``) is shown by its first
    part, which says enough: the CSV keeps the whole name.
    """
    if not op.module:
        return "-"
    if "#" in op.module:  # module paths never hold one: the name of a range
        return op.module.split("#", 1)[0]
    backward = op.module.endswith(" (backward)")
    path = op.module.removesuffix(" (backward)").split("/")
    shown = "/".join(path[-_SHOWN_MODULES:])
    if len(path) > _SHOWN_MODULES:
        shown = f"…/{shown}"
    return shown + " (backward)" * backward


def _viewer() -> str:
    from trainwell.engine.tools.profiling import VIEWER

    return VIEWER
