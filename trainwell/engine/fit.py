"""``fit``: build the parts, resume, open the run, train, test with the best weights, finish.

The loop itself is the :class:`~trainwell.engine.loop.trainer.Trainer`; this module assembles
its collaborators from the config and what the caller passed in, and owns the run's
beginning and end (the run directory, the summary, the final test).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from torch import nn
from torch.utils.data import DataLoader

from trainwell.config import Config, check_warmup, load_config
from trainwell.doctor.findings import render
from trainwell.doctor.frame import Doctor
from trainwell.engine.build.doctor_data import point_at_data
from trainwell.engine.build.given_model import attach, record_of
from trainwell.engine.build.given_optim import optimization
from trainwell.engine.build.metric_objects import split_metrics
from trainwell.engine.build.parts import Given, Parts, build_parts
from trainwell.engine.build.preflight import label_checker
from trainwell.engine.build.run_checks import check_on_every_rank
from trainwell.engine.checkpointing.checkpointer import Checkpointer, resume_point
from trainwell.engine.checkpointing.resume import restore
from trainwell.engine.distributed.compiling import checkpoint_activations, compile_model
from trainwell.engine.distributed.fsdp import is_sharded
from trainwell.engine.distributed.placement import (
    DistConfig,
    Placement,
    barrier,
    setup,
    teardown,
    unwrap,
    wrap,
)
from trainwell.engine.loading.loaders import TrainData, eval_loader, shutdown_workers
from trainwell.engine.loading.seeding import seed_everything
from trainwell.engine.loop.amp import fp32_modules, precision_line
from trainwell.engine.loop.assembly import Assembly
from trainwell.engine.loop.evaluate import Evaluator
from trainwell.engine.loop.memory_watch import apply_cuda_alloc_conf
from trainwell.engine.loop.monitor import choose_monitor
from trainwell.engine.loop.progress import Progress, make_console
from trainwell.engine.loop.stack_room import call_with_room
from trainwell.engine.loop.trainer import Trainer
from trainwell.engine.run.failure import end_failed
from trainwell.engine.run.result import FitResult
from trainwell.engine.run.run_files import (
    finish,
    open_run_dir,
    run_loggers,
    start_loggers,
    start_summary,
)
from trainwell.engine.run.stop_report import annotate
from trainwell.engine.run_dir.directory import new_run_path
from trainwell.engine.state.callbacks import build_callbacks
from trainwell.engine.state.early_stopping import EarlyStopping
from trainwell.engine.state.loop_state import LoopState
from trainwell.engine.state.signals import GracefulStop
from trainwell.engine.step.anatomy import StepClock
from trainwell.engine.step.precision import Precision, resolve_precision
from trainwell.engine.step.step_fn import LossFn, StepFn
from trainwell.engine.step.stepper import Stepper
from trainwell.engine.tools.dry_run import dry_run_report
from trainwell.engine.tools.overfit_run import overfit_run
from trainwell.engine.tools.profiling import StepProfiler
from trainwell.errors import UserError
from trainwell.loggers import check_extras


@dataclass
class _Session:
    cfg: Config
    place: Placement
    given: Given
    resume: str | Path | None
    console: Console
    doc: Doctor | None
    stop: GracefulStop


def fit(
    config: Config | str | Path | None = None,
    *,
    model: nn.Module | None = None,
    train_data: Any = None,
    val_data: Any = None,
    test_data: Any = None,
    loss_fn: LossFn | None = None,
    step_fn: StepFn | None = None,
    eval_step_fn: StepFn | None = None,
    callbacks: list[Any] | None = None,
    metrics: dict[str, Any] | None = None,
    optimizer: Any = None,
    scheduler: Any = None,
    resume: str | Path | None = None,
    dry_run: bool = False,
    console: Console | None = None,
) -> FitResult:
    """Train a model as the config says; objects passed in replace the config's choices.

    Args:
        config: a :class:`~trainwell.config.Config`, a YAML path, or ``None`` for defaults.
        model: an ``nn.Module`` to train instead of ``model.name``.
        train_data: a ``Dataset``, ``IterableDataset`` or ``DataLoader`` instead of ``data.name``.
        val_data: the same for validation (without it there is none); test_data: for the test.
        loss_fn: ``loss_fn(outputs, targets) -> scalar`` instead of ``train.loss``, for
            ``(input, target)`` batches.
        step_fn: ``step(model, batch) -> loss | {"loss": loss, "metric": value}`` instead
            of ``train.step``: the forward and loss of one micro-batch of any shape.
        eval_step_fn: the step for evaluation (default: ``step_fn`` without grad).
        callbacks: objects with any of ``on_fit_start``, ``on_step_end``, ``on_eval_end``,
            ``on_checkpoint``, ``on_fit_end`` (after the config's ``callbacks``).
        optimizer: a ``torch.optim.Optimizer`` over ``model``'s parameters, or a factory
            ``fn(model) -> optimizer`` (required under ``dist.strategy=fsdp``), instead of
            ``optim.*``.
        scheduler: an lr scheduler of that optimizer, or a factory ``fn(optimizer) ->
            scheduler``, instead of ``sched.*``; stepped every optimizer step.
        metrics: metric objects by name (``update(preds, target)``, ``compute()``,
            ``reset()``), beside the config's ``train.metrics``: ``val/NAME``, ``test/NAME``.
        resume: ``"auto"`` (the newest usable checkpoint of ``run.dir``, if any) or the
            path of a checkpoint; the run continues exactly where it stopped.
        dry_run: one step on a real batch and one eval batch, then stop; prints shapes
            and parameter counts and writes nothing.
        console: where progress goes (default: standard output).

    Returns:
        A :class:`FitResult` with the run directory, the final metrics and the model.

    Example:
        >>> import torch, trainwell
        >>> from torch.utils.data import TensorDataset
        >>> x, y = torch.randn(256, 4), torch.randn(256, 1)
        >>> def step(model, batch):
        ...     out = model(batch[0])
        ...     loss = torch.nn.functional.mse_loss(out, batch[1])
        ...     return {"loss": loss, "mae": (out - batch[1]).abs().mean()}
        >>> cfg = trainwell.load_config(overrides=["train.epochs=2", "data.batch_size=32"])
        >>> result = trainwell.fit(cfg, model=torch.nn.Linear(4, 1), step_fn=step,
        ...                        train_data=TensorDataset(x, y), val_data=TensorDataset(x, y))
        ... # doctest: +SKIP
        >>> result.metrics["val/mae"]  # doctest: +SKIP
    """
    cfg = config if isinstance(config, Config) else load_config(config)
    given = Given(model, train_data, val_data, test_data, loss_fn, step_fn, eval_step_fn,
                  callbacks, optimizer=optimizer, scheduler=scheduler, metrics=metrics)  # fmt: skip
    apply_cuda_alloc_conf(cfg.run.cuda_alloc_conf, (console or make_console()).print)
    place = setup(cfg.run.device, cfg.dist)
    try:
        # Only rank 0 talks; the others would repeat every line.
        console = (console or make_console()) if place.is_main else make_console(quiet=True)
        doc = None
        if cfg.doctor.enabled and not dry_run:
            # Findings print as they appear, and land in doctor.json with the run.
            doc = Doctor(on_finding=lambda f: console.print(render(f), markup=False))
        # Signals are honoured from set-up to the last write: the first one is a flag the
        # run reads at safe points, a second one aborts at once.
        stop = GracefulStop()
        session = _Session(cfg, place, given, resume, console, doc, stop)
        with stop, doc if doc is not None else contextlib.nullcontext():
            result = _fit(session, dry_run)
        # No rank leaves the group while another still works (rank 0 writes the summary
        # and plots last): gloo aborts a process whose peer vanished mid-conversation.
        barrier(place)
        return result
    finally:
        teardown()


def _fit(s: _Session, dry_run: bool) -> FitResult:
    cfg, place = s.cfg, s.place
    check_extras(cfg.log)  # a missing extra is news before anything is built
    check_on_every_rank(cfg, place)  # so are a store that does not answer, a bad batch split
    quiet = s.doc.muted if s.doc is not None else contextlib.nullcontext
    parts = build_parts(cfg, place, s.given, quiet=quiet)
    record = record_of(parts, s.given)  # how export/predict rebuild a model passed in
    if cfg.model.activation_checkpointing:
        blocks = checkpoint_activations(parts.model, cfg.model.activation_checkpointing)
        s.console.print(f"activation checkpointing: {len(blocks)} blocks recompute in "
                        f"backward ({', '.join(blocks[:4])}{', ...' if len(blocks) > 4 else ''})",
                        highlight=False)  # fmt: skip
    if cfg.model.channels_last:
        # 4-D (conv) weights; others stay. torch's stubs lack Module.to's memory_format.
        parts.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    # DDP on several processes, or FSDP; `model` stays the raw module whose state is saved.
    precision = resolve_precision(cfg.train.precision, place.device)
    fp32_modules(parts.model, cfg.train.fp32_modules, precision, place.device, s.console.print)
    net = wrap(parts.model, place, cfg.dist, precision,
               say=lambda line: s.console.print(line, highlight=False, markup=False))  # fmt: skip
    if place.distributed:
        # Same initial weights everywhere (DDP also broadcasts them), then a random
        # stream per rank, so that dropout masks differ between ranks.
        seed_everything(cfg.run.seed + 1_000_003 * place.rank)
    data = TrainData.build(parts.splits.train, parts.loaders, place)
    if cfg.doctor.overfit_batch and not dry_run:
        # A diagnostic in place of training, with its own short loop, optimizer and schedule.
        if s.resume is not None:
            raise UserError("doctor.overfit_batch=true is a fresh check; it does not resume a run")
        return overfit_run(cfg, place, net, parts, data, s.console, s.doc)
    plan = _assemble(s, parts, net, data, precision)
    attach(record, plan.checkpointer.extra, None if dry_run else s.console)
    if dry_run:
        dry_run_report(s.console, cfg, parts, plan)
        return FitResult(run_dir=None, metrics={}, model=plan.model)
    _notes(s, data)
    return _train(s, parts, plan)


def _total_steps(cfg: Config, data: TrainData) -> int:
    if data.steps_per_epoch is None:
        if not cfg.train.max_steps:
            raise UserError(
                "train.max_steps: the training data has no length (an IterableDataset or a "
                "loader without __len__), so the schedule's length must be given; set "
                "train.max_steps"
            )
        return cfg.train.max_steps
    total = cfg.train.epochs * data.steps_per_epoch
    return min(total, cfg.train.max_steps) if cfg.train.max_steps else total


def _assemble(
    s: _Session, parts: Parts, net: nn.Module, data: TrainData, precision_name: str
) -> Assembly:
    """The Trainer's collaborators; nothing written yet (a dry run stops after)."""
    cfg, place = s.cfg, s.place
    model = unwrap(net)
    total_steps = _total_steps(cfg, data)
    check_warmup(cfg.sched.warmup_steps, total_steps)
    optimizer, scheduler = optimization(cfg, model, total_steps, s.given.optimizer,
                                        s.given.scheduler, s.console.print, net)  # fmt: skip
    precision = Precision.build(precision_name, place.device)
    objects = split_metrics(cfg.train.metrics, parts.task, parts.steps.eval, place, s.given.metrics)
    callbacks = build_callbacks(cfg.callbacks, s.given.callbacks)
    monitor, mode = choose_monitor(cfg.early_stop, parts.task, parts.splits.val is not None,
                                   objects, callbacks)  # fmt: skip
    stopper = EarlyStopping(monitor, mode, cfg.early_stop.patience, cfg.early_stop.min_delta)
    loop = LoopState(place.device)
    eager = None
    if cfg.train.compile:
        eager, net = net, compile_model(net, cfg.train.compile_mode)
    # The loop owns the step anatomy and the fp16 skipped-step counter (checkpointed);
    # the stepper marks its phases on the one and counts into the other.
    clock = StepClock(place.device)
    skipped = loop.amp_skipped if precision.scaler is not None else None
    stepper = Stepper(net, parts.steps.train, optimizer, precision, cfg.train.grad_clip,
                      place.device, clock=clock, eager=eager, amp_skipped=skipped,
                      channels_last=cfg.model.channels_last,
                      on_compile_failure=lambda line: s.console.print(
                          f"[yellow]warning[/]: {line}", highlight=False))  # fmt: skip
    return Assembly(
        cfg=cfg,
        place=place,
        model=model,
        data=data,
        stepper=stepper,
        clock=clock,
        scheduler=scheduler,
        stopper=stopper,
        monitor=monitor,
        loop=loop,
        checkpointer=Checkpointer(
            cfg, place, model, optimizer, scheduler, precision, stopper, loop, callbacks
        ),  # fmt: skip
        evaluator=Evaluator(model, parts.steps.eval, precision, place, metrics=objects,
                            lockstep=place.distributed and is_sharded(model)),  # fmt: skip
        val_loader=eval_loader(parts.splits.val, parts.loaders, place),
        total_steps=total_steps,
        check_labels=label_checker(parts.task, parts.splits.train),
        stop=s.stop,
        callbacks=callbacks,
        findings=_findings(s.doc),
    )


def _findings(doc: Doctor | None) -> Callable[[], list]:
    """The doctor's findings so far, read when asked (none without the doctor)."""
    if doc is None:
        return list
    return lambda: doc.findings


def _notes(s: _Session, data: TrainData) -> None:
    say = s.console.print
    alone = DistConfig(strategy=s.cfg.dist.strategy)  # fsdp alone says so itself
    if not s.place.distributed and s.cfg.dist != alone:
        say("[yellow]warning[/]: dist.* settings have no effect with one process")
    for line in data.notes(s.place.world_size):
        say(line, soft_wrap=True)


def _train(s: _Session, parts: Parts, plan: Assembly) -> FitResult:
    cfg, place, console = s.cfg, s.place, s.console
    point_at_data(s.doc, cfg.data.name, parts.splits.train)
    resumed = resume_point(cfg, s.resume, lambda m: console.print(m, markup=False, soft_wrap=True))
    run_path = new_run_path(cfg.run, cfg.run.name or parts.name)
    if resumed is not None and not cfg.run.dir and resumed[0].parent.name == "checkpoints":
        run_path = resumed[0].parent.parent  # --resume PATH continues PATH's own run
    ckpt = plan.checkpointer
    if resumed is not None:
        restore(ckpt, *resumed, say=lambda m: s.console.print(m, highlight=False))
    # A signal during set-up stops here, before anything is written.
    plan.stop_if_requested()
    run = open_run_dir(cfg, run_path, s.resume, resumed, place)
    if resumed is not None:  # said once the run is ours: the lock may refuse it
        console.print(f"resuming from {resumed[0]} at step {plan.loop.step}", highlight=False)
    for note in run.notes:
        console.print(f"warning: {note}", markup=False, highlight=False, soft_wrap=True)
    summary = start_summary(plan, resumed[0] if resumed else None)
    run.write_summary(summary)
    console.print(
        f"[bold]trainwell[/] run [cyan]{run.path}[/]: {_plan(cfg, plan)}, "
        f"{plan.stepper.precision.name} on {place.device}",
        highlight=False,
    )
    console.print(precision_line(cfg.train.precision, plan.stepper.precision.name,
                                 place.device), highlight=False, markup=False)  # fmt: skip
    if resumed is not None:
        # Last of all: set-up above must not shift the random streams the run continues.
        ckpt.restore_rng(resumed[1])
    progress = Progress(console, plan.total_steps, plan.loop.step, epoch=lambda: plan.loop.epoch)
    say = lambda m: console.print(m, markup=False, highlight=False)  # noqa: E731
    loggers = run_loggers(run, progress, plan.loop, say)
    profiler = None
    if cfg.train.profile and place.is_main:
        profiler = StepProfiler(run.path, device=place.device, with_stack=s.doc is None)
    trainer = Trainer.start(plan, run=run, progress=progress, loggers=loggers, profiler=profiler)
    started = time.time()
    try:
        # Inside: a store that cannot start, or a signal while it stalls, ends the run
        # as failed or interrupted like any error of the run.
        start_loggers(loggers, cfg, place, run, plan.loop, resumed)
        # The loop's frames in a stack chunk of their own: no mmap per step at some depths.
        summary["stop_reason"] = call_with_room(trainer.train, resumed is not None)
        trainer.end_profile()  # a run shorter than the profiler's window
        trainer.progress.close()
        summary["weights"] = ckpt.load_best_weights(run)
        closing = annotate(trainer, summary)
        _test(trainer, eval_loader(parts.splits.test, parts.loaders, place))
        trainer.notify("on_fit_end")
        # A signal during the test: the run ends interrupted, and its resume tests again.
        trainer.stop_if_requested()
    except BaseException as exc:
        end_failed(trainer, summary, started, exc, console=s.console, stop=s.stop, doc=s.doc)
        raise
    finally:
        for loader in (trainer.data.loader, trainer.val_loader):
            shutdown_workers(loader)
    finish(run, summary, "completed", trainer, started, s.doc)
    shown = ", ".join(f"{k} {v:.4f}" for k, v in trainer.loop.metrics.items())
    console.print(f"[green]done[/] in {summary['wall_time_s']:.1f}s: {shown}", highlight=False)
    for line in closing:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(f"run directory: {run.path}", highlight=False)
    return FitResult(run.path, dict(trainer.loop.metrics), summary, trainer.model)


def _test(trainer: Trainer, test: DataLoader | None) -> None:
    if test is None:
        return
    metrics = {f"test/{name}": value for name, value in trainer.evaluator(test).items()}
    shutdown_workers(test)
    trainer.loop.metrics.update(metrics)
    trainer.loggers.log_metrics(trainer.loop.step, metrics)


def _plan(cfg: Config, trainer: Assembly) -> str:
    data = trainer.data
    epochs = f"{cfg.train.epochs} epochs x {data.steps_per_epoch} steps"
    if data.steps_per_epoch is None:
        epochs = f"{trainer.total_steps} steps"
    return f"{epochs}, {data.batch_plan(cfg.data.batch_size, trainer.place.world_size)}"
