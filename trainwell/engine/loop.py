"""The training loop: set up, then one explicit loop read top to bottom.

``fit`` builds the collaborators (placement, data, model, optimizer, schedule,
precision, run directory) and then runs::

    for epoch:
        for optimizer step:
            zero grads -> [micro-batch: forward under autocast -> loss / accum -> backward]
            -> unscale -> clip -> optimizer step -> scheduler step -> log every N steps
        evaluate -> best checkpoint -> last checkpoint -> early stopping
    test with the best checkpoint -> summary

Metrics stay on the device between log points: ``.item()`` forces a CPU-GPU sync, so it
runs every ``train.log_every`` steps, not every step.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import trainwell
from trainwell import config as config_mod
from trainwell.config import Config, load_config
from trainwell.data import DataSplits, build_data, check_labels, targets_of
from trainwell.doctor.crash import explain as explain_crash
from trainwell.doctor.findings import render
from trainwell.doctor.findings import to_json as doctor_json
from trainwell.doctor.frame import Doctor
from trainwell.engine import checkpoint as ckpt
from trainwell.engine import overfit
from trainwell.engine.distributed import (
    DistConfig,
    Placement,
    ShardSampler,
    all_reduce_sum,
    any_process,
    barrier,
    broadcast_object,
    gather_objects,
    no_sync,
    setup,
    teardown,
    unwrap,
    wrap,
)
from trainwell.engine.early_stopping import EarlyStopping, resolve_monitor
from trainwell.engine.optim import build_optimizer, build_scheduler, lr_factor
from trainwell.engine.precision import Precision, resolve_precision
from trainwell.engine.resume import config_changes, remove_stale_temporaries
from trainwell.engine.resume import find as find_checkpoint
from trainwell.engine.rundir import NullRunDir, RunDir, default_name, new_run_path
from trainwell.engine.seeding import epoch_seed, seed_everything, seed_worker, set_deterministic
from trainwell.engine.signals import GracefulStop, Interrupted
from trainwell.errors import UserError
from trainwell.imports import is_import_path, resolve
from trainwell.models import build_model


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes:
        run_dir: the run directory (``None`` for a dry run).
        metrics: final metrics as floats, e.g. ``{"val/accuracy": 0.99, "test/loss": 0.04}``.
        summary: the content of ``summary.json``.
        model: the trained model, holding the best checkpoint's weights when there was one.
    """

    run_dir: Path | None
    metrics: dict[str, float]
    summary: dict[str, Any] = field(default_factory=dict)
    model: nn.Module | None = None


def fit(
    config: Config | str | Path | None = None,
    *,
    model: nn.Module | None = None,
    train_data: Dataset | None = None,
    val_data: Dataset | None = None,
    test_data: Dataset | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    resume: str | Path | None = None,
    dry_run: bool = False,
    console: Console | None = None,
) -> FitResult:
    """Train a model as the config says; objects passed in replace the config's choices.

    Args:
        config: a :class:`~trainwell.config.Config`, a YAML path, or ``None`` for defaults.
        model: an ``nn.Module`` to train instead of ``model.name``.
        train_data, val_data, test_data: ``Dataset`` objects of ``(input, target)``
            samples instead of ``data.name``; without ``val_data`` there is no validation.
        loss_fn: ``loss_fn(outputs, targets) -> scalar`` instead of ``train.loss``.
        resume: ``"auto"`` (the newest usable checkpoint of ``run.dir``, if any) or the
            path of a checkpoint; the run continues exactly where it stopped.
        dry_run: one forward/backward on a real batch and one eval batch, then stop;
            prints shapes and parameter counts and writes nothing.
        console: where progress goes (default: standard output).

    Returns:
        A :class:`FitResult` with the run directory and the final metrics.

    Example:
        >>> import torch, trainwell
        >>> from torch.utils.data import TensorDataset
        >>> x, y = torch.randn(256, 4), torch.randint(0, 3, (256,))
        >>> cfg = trainwell.load_config(overrides=["train.epochs=2", "data.batch_size=32"])
        >>> result = trainwell.fit(cfg, model=torch.nn.Linear(4, 3),
        ...                        train_data=TensorDataset(x, y), val_data=TensorDataset(x, y))
        ... # doctest: +SKIP
        >>> result.metrics["val/accuracy"]  # doctest: +SKIP
    """
    cfg = config if isinstance(config, Config) else load_config(config)
    place = setup(cfg.run.device, cfg.dist)
    try:
        # Only rank 0 talks; the others would repeat every line.
        console = (console or Console()) if place.is_main else Console(quiet=True)
        doc = None
        if cfg.doctor.enabled and not dry_run:
            # Findings print as they appear, and land in doctor.json with the run.
            doc = Doctor(on_finding=lambda f: console.print(render(f), markup=False))
        with doc if doc is not None else contextlib.nullcontext():
            result = _fit(cfg, place, model, train_data, val_data, test_data, loss_fn,
                          resume, dry_run, console, doc)  # fmt: skip
        # No rank leaves the group while another still works (rank 0 writes the summary
        # and plots last): gloo aborts a process whose peer vanished mid-conversation.
        barrier(place)
        return result
    finally:
        teardown()


def _fit(
    cfg: Config,
    place: Placement,
    model: nn.Module | None,
    train_data: Dataset | None,
    val_data: Dataset | None,
    test_data: Dataset | None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None,
    resume: str | Path | None,
    dry_run: bool,
    console: Console,
    doc: Doctor | None,
) -> FitResult:
    # ---- data, model, loss -------------------------------------------------------------
    parts = build_parts(cfg, place, model, train_data, val_data, test_data, loss_fn)
    splits, model, loss_fn, task = parts.splits, parts.model, parts.loss_fn, parts.task
    # DDP on several processes; `model` stays the raw module whose state is saved.
    net = wrap(model, place, cfg.dist)
    model = unwrap(net)
    if place.distributed:
        # Same initial weights everywhere (DDP also broadcasts them), then a random
        # stream per rank, so that dropout masks differ between ranks.
        seed_everything(cfg.run.seed + 1_000_003 * place.rank)

    micro_batch = _micro_batch(cfg, place)
    train_loader, sampler, generator = _train_loader(cfg, splits.train, micro_batch, place)
    steps_per_epoch = steps_in_epoch(cfg, train_loader, splits.train)
    if cfg.doctor.overfit_batch and not dry_run:
        # A diagnostic in place of training, with its own short loop, optimizer and schedule.
        return _overfit_run(cfg, place, net, loss_fn, train_loader, sampler, generator,
                            task.num_classes, resume, console, doc)  # fmt: skip
    total_steps = cfg.train.epochs * steps_per_epoch
    if cfg.train.max_steps:
        total_steps = min(total_steps, cfg.train.max_steps)
    config_mod.check_warmup(cfg.sched.warmup_steps, total_steps)
    val_loader = _eval_loader(cfg, splits.val, place)
    test_loader = _eval_loader(cfg, splits.test, place)

    optimizer = build_optimizer(cfg.optim, model)
    scheduler = build_scheduler(cfg.sched, optimizer, total_steps)
    precision = Precision.build(resolve_precision(cfg.train.precision, place.device), place.device)
    monitor, mode = resolve_monitor(cfg.early_stop, splits.val is not None, task.classification)
    stopper = EarlyStopping(monitor, mode, cfg.early_stop.patience, cfg.early_stop.min_delta)
    # Only targets the data set could not show up front are checked batch by batch.
    check_batches = task.num_classes is not None and targets_of(splits.train) is None

    if dry_run:
        _dry_run(
            console,
            model,
            loss_fn,
            precision,
            train_loader,
            val_loader,
            place,
            cfg,
            micro_batch,
            steps_per_epoch,
            total_steps,
        )
        return FitResult(run_dir=None, metrics={}, model=model)

    if not place.distributed and cfg.dist != DistConfig():
        console.print("[yellow]warning[/]: dist.* settings have no effect with one process")

    # ---- run directory (fresh, or the one being resumed) --------------------------------
    # Every rank loads the checkpoint; only rank 0 writes the run directory.
    resumed = _resume_point(cfg, resume, console)
    run_path = new_run_path(cfg.run, default_name(cfg.data.name, cfg.model.name))
    if resumed is not None and not cfg.run.dir and resumed[0].parent.name == "checkpoints":
        run_path = resumed[0].parent.parent  # --resume PATH continues PATH's own run
    ts = TrainState(cfg, model, optimizer, scheduler, precision, stopper, place.device)
    if resumed is not None:
        ckpt_path, state = resumed
        for change in config_changes(state["config"], ts.config_dict):
            console.print(f"config changed since the checkpoint: {change}", highlight=False)
        ts.load_state_dict(state, place.device)
        console.print(f"resuming from {ckpt_path} at step {ts.step}", highlight=False)
    run = _open_run_dir(cfg, run_path, resume, resumed, place)
    started = time.time()
    summary: dict[str, Any] = {
        "status": "running",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "resumed_from": str(resumed[0]) if resumed else None,
        "device": str(place.device),
        "world_size": place.world_size,
        "precision": precision.name,
        "monitor": monitor,
        "batch": {
            "global": cfg.data.batch_size,
            "micro": micro_batch,
            "grad_accum_steps": cfg.train.grad_accum_steps,
        },
        "steps_per_epoch": steps_per_epoch,
        "total_steps": total_steps,
    }
    run.write_summary(summary)
    console.print(
        f"[bold]trainwell[/] run [cyan]{run.path}[/]: {cfg.train.epochs} epochs x "
        f"{steps_per_epoch} steps, batch {cfg.data.batch_size} "
        f"({micro_batch} x {cfg.train.grad_accum_steps} accum x {place.world_size} proc), "
        f"{precision.name} on {place.device}",
        highlight=False,
    )

    # ---- the loop ----------------------------------------------------------------------
    # Where to start: a checkpoint taken at an epoch's end resumes at the next epoch.
    start_epoch, skip_steps = ts.epoch, ts.step - ts.epoch_start_step
    if resumed is None or skip_steps >= steps_per_epoch:
        start_epoch, skip_steps = (ts.epoch + 1 if resumed else 0), 0
    if resumed is not None:
        # Last of all: set-up above must not shift the random streams the run continues.
        saved = resumed[1]
        per_rank = saved.get("rng_per_rank") or []
        restore_rng(per_rank[place.rank] if len(per_rank) == place.world_size else saved["rng"])
    train_time, samples_seen = 0.0, 0
    progress = _Progress(console, total_steps, ts.step)
    stop_reason = "epochs"
    accum = cfg.train.grad_accum_steps
    trainable = [p for p in model.parameters() if p.requires_grad]
    first_step = True
    # Test-only: a worker that dies at a chosen step on the first attempt, to exercise
    # the launcher's restarts (read once here, not in the hot path).
    crash_at = _test_crash_step(place)
    # A signal is honoured at a step boundary. On several processes the ranks must agree
    # on which one, which takes a collective (and a device sync on CUDA): do it at the
    # log points only, where the loop syncs anyway.
    stop_check_every = cfg.train.log_every if place.distributed else 1
    try:
        with GracefulStop() as stop:
            for epoch in range(start_epoch, cfg.train.epochs):
                if ts.step >= total_steps:
                    break
                skip = skip_steps if epoch == start_epoch else 0
                ts.epoch, ts.epoch_start_step = epoch, ts.step - skip
                # The data order of an epoch is a function of (seed, epoch) alone; a
                # resumed epoch starts where the checkpoint left it.
                sampler.set_epoch(epoch, skip_samples=skip * accum * micro_batch)
                generator.manual_seed(epoch_seed(cfg.run.seed, epoch))
                model.train()
                batches = iter(train_loader)
                if not skip:
                    ts.epoch_loss.zero_()
                    ts.window_loss.zero_()
                    ts.window_steps = 0
                t0 = time.perf_counter()
                for _ in range(steps_per_epoch - skip):
                    optimizer.zero_grad(set_to_none=True)
                    for micro in range(accum):
                        inputs, targets = next(batches)[:2]
                        if check_batches and epoch == 0:
                            _check_batch_targets(targets, task.num_classes)
                        inputs = inputs.to(place.device, non_blocking=True)
                        targets = targets.to(place.device, non_blocking=True)
                        # DDP all-reduces gradients on the last micro-step only.
                        with no_sync(net, sync=micro == accum - 1):
                            with precision.autocast():
                                loss = loss_fn(net(inputs), targets)
                            # Mean over the global batch: each micro-batch adds 1/accum.
                            scaled = loss / accum if accum > 1 else loss
                            if precision.scaler is not None:
                                precision.scaler.scale(scaled).backward()
                            else:
                                scaled.backward()
                        # Running sums stay on the device; read at log points only.
                        ts.window_loss += scaled.detach()
                    if place.distributed and first_step:
                        _check_all_params_got_grads(model, cfg)
                        first_step = False
                    if precision.scaler is not None:
                        # Unscale first so that clipping sees the true gradient norm.
                        precision.scaler.unscale_(optimizer)
                    if cfg.train.grad_clip > 0:
                        nn.utils.clip_grad_norm_(trainable, cfg.train.grad_clip)
                    if precision.scaler is not None:
                        precision.scaler.step(optimizer)
                        precision.scaler.update()
                    else:
                        optimizer.step()
                    scheduler.step()
                    ts.step += 1
                    if ts.step == crash_at:
                        os._exit(13)
                    ts.window_steps += 1
                    samples_seen += cfg.data.batch_size

                    if ts.step % cfg.train.log_every == 0 or ts.step == total_steps:
                        ts.epoch_loss += ts.window_loss
                        # The window's one sync (and, on several processes, its mean).
                        window = all_reduce_sum([ts.window_loss.item()], place)[0]
                        mean_loss = window / place.world_size / ts.window_steps
                        ts.window_loss.zero_()
                        ts.window_steps = 0
                        lr = optimizer.param_groups[0]["lr"]
                        run.log(ts.step, epoch, "train", "loss", mean_loss)
                        run.log(ts.step, epoch, "train", "lr", lr)
                        elapsed = train_time + time.perf_counter() - t0
                        progress.update(ts.step, epoch, mean_loss, lr, samples_seen / elapsed)
                    if cfg.checkpoint.every_steps and ts.step % cfg.checkpoint.every_steps == 0:
                        _save(run, [f"step-{ts.step}.pt"], ts, place)
                        if place.is_main:
                            ckpt.rotate(run.checkpoints, cfg.checkpoint.keep_last)
                    if ts.step % stop_check_every == 0:
                        _stop_if_requested(stop, place)
                    if ts.step >= total_steps:
                        break
                train_time += time.perf_counter() - t0

                # ---- end of epoch: evaluate, checkpoint, maybe stop ----
                ts.epoch_loss += ts.window_loss
                ts.window_loss.zero_()
                ts.window_steps = 0
                steps_this_epoch = ts.step - ts.epoch_start_step
                epoch_loss = all_reduce_sum([ts.epoch_loss.item()], place)[0] / place.world_size
                fresh = {"train/loss": epoch_loss / steps_this_epoch}
                finished = ts.step >= total_steps or epoch == cfg.train.epochs - 1
                if val_loader is not None and ((epoch + 1) % cfg.train.eval_every == 0 or finished):
                    val = evaluate(model, val_loader, loss_fn, precision, place.device, place)
                    for name, value in val.items():
                        fresh[f"val/{name}"] = value
                        run.log(ts.step, epoch, "val", name, value)
                ts.metrics.update(fresh)
                run.flush()
                # Only a metric computed this epoch counts towards the best and patience.
                improved = monitor in fresh and stopper.update(fresh[monitor])
                if improved:
                    ts.best = {"metric": monitor, "value": fresh[monitor], "step": ts.step,
                               "epoch": epoch}  # fmt: skip
                _save(run, ["best.pt", "last.pt"] if improved else ["last.pt"], ts, place)
                progress.epoch_line(epoch, cfg.train.epochs, ts.step, ts.metrics)
                if stopper.should_stop:
                    stop_reason = f"early stop: no better {monitor} in {stopper.patience} evals"
                    break
                _stop_if_requested(stop, place)
            if cfg.train.max_steps and ts.step >= cfg.train.max_steps:
                stop_reason = "max_steps"
    except KeyboardInterrupt as exc:
        progress.close()
        if isinstance(exc, Interrupted) and not exc.abort:
            # Raised at a step boundary: this state resumes exactly. An abort (a second
            # signal) or a bare Ctrl-C may have come mid-step: keep the last checkpoint.
            _save(run, ["last.pt"], ts, place)
        _finish(run, summary, "interrupted", ts, started, train_time, samples_seen, doc)
        console.print(
            f"[yellow]interrupted[/] at step {ts.step}; resume with:\n  trainwell train "
            f"--config {run.path / 'config.yaml'} run.dir={run.path} --resume auto",
            highlight=False,
        )
        raise
    except BaseException as exc:
        progress.close()
        summary["error"] = f"{type(exc).__name__}: {exc}"
        if doc is not None:
            explain_crash(doc, exc)
        _finish(run, summary, "failed", ts, started, train_time, samples_seen, doc)
        raise
    progress.close()

    # ---- test with the best weights ----------------------------------------------------
    if test_loader is not None:
        best_path = run.checkpoints / "best.pt"
        if best_path.exists():
            model.load_state_dict(ckpt.load_checkpoint(best_path)["model"])
        test = evaluate(model, test_loader, loss_fn, precision, place.device, place)
        for name, value in test.items():
            ts.metrics[f"test/{name}"] = value
            run.log(ts.step, ts.epoch, "test", name, value)
    summary["stop_reason"] = stop_reason
    _finish(run, summary, "completed", ts, started, train_time, samples_seen, doc)
    shown = ", ".join(f"{k} {v:.4f}" for k, v in ts.metrics.items())
    console.print(f"[green]done[/] in {summary['wall_time_s']:.1f}s: {shown}", highlight=False)
    console.print(f"run directory: {run.path}", highlight=False)
    return FitResult(run_dir=run.path, metrics=dict(ts.metrics), summary=summary, model=model)


# ---- evaluation --------------------------------------------------------------------------


@torch.inference_mode()
def evaluate(
    model: nn.Module,
    loader: DataLoader,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    precision: Precision,
    device: torch.device,
    place: Placement | None = None,
) -> dict[str, float]:
    """Mean loss (and accuracy, for class targets) over ``loader``, in eval mode.

    Sums stay on the device and are read once at the end; on several processes they are
    summed over ranks, each holding a disjoint shard, so every sample counts once. The
    model's train/eval mode is restored afterwards.

    Example:
        >>> from torch.utils.data import TensorDataset
        >>> loader = DataLoader(TensorDataset(torch.zeros(4, 2), torch.tensor([0, 1, 1, 1])))
        >>> p = Precision.build("fp32", torch.device("cpu"))
        >>> net = nn.Linear(2, 2)
        >>> sorted(evaluate(net, loader, nn.CrossEntropyLoss(), p, torch.device("cpu")))
        ['accuracy', 'loss']
    """
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    correct = torch.zeros((), device=device, dtype=torch.int64)
    count = 0
    classification = False
    for batch in loader:
        inputs = batch[0].to(device, non_blocking=True)
        targets = batch[1].to(device, non_blocking=True)
        with precision.autocast():
            outputs = model(inputs)
            loss = loss_fn(outputs, targets)
        n = targets.shape[0]
        loss_sum += loss.double() * n
        if _is_classification(outputs, targets):
            classification = True
            correct += (outputs.argmax(dim=1) == targets).sum()
        count += n
    model.train(was_training)
    total_loss, total_correct, total, any_class = all_reduce_sum(
        [loss_sum.item(), correct.item(), count, float(classification)],
        place or Placement(device),
    )
    result = {"loss": total_loss / max(total, 1)}
    if any_class:
        result["accuracy"] = total_correct / max(total, 1)
    return result


def _is_classification(outputs: torch.Tensor, targets: torch.Tensor) -> bool:
    return (
        outputs.ndim == 2
        and targets.ndim == 1
        and not targets.is_floating_point()
        and not targets.is_complex()
    )


# ---- set-up helpers ----------------------------------------------------------------------


@dataclass
class Parts:
    """What :func:`build_parts` builds: the data, the model on its device, the loss."""

    splits: DataSplits
    model: nn.Module
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    task: _Task


def build_parts(
    cfg: Config,
    place: Placement,
    model: nn.Module | None = None,
    train_data: Dataset | None = None,
    val_data: Dataset | None = None,
    test_data: Dataset | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> Parts:
    """Data splits, model (on ``place.device``) and loss, built and seeded as :func:`fit` does.

    Objects passed in replace the config's choices. The seeding is part of the contract:
    the initial weights depend on ``run.seed`` alone, so a tool that builds its parts here
    (``trainwell lr-find``) starts from the very weights ``trainwell train`` would.

    Example:
        >>> cfg = load_config(overrides=["data.name=synthetic", "model.name=mlp"])
        >>> parts = build_parts(cfg, Placement(torch.device("cpu")))
        >>> type(parts.model).__name__, parts.task.num_classes
        ('Sequential', 10)
    """
    set_deterministic(cfg.run.deterministic)
    seed_everything(cfg.run.seed)
    splits = _splits(cfg, train_data, val_data, test_data)
    # Seeded just before the model is built, so its initial weights depend only on the seed.
    seed_everything(cfg.run.seed)
    if model is None:
        model = build_model(cfg.model, splits.num_classes, splits.input_shape)
    model = model.to(place.device)
    loss_fn = loss_fn or build_loss(cfg)
    task = _preflight(model, loss_fn, splits, place.device)
    return Parts(splits, model, loss_fn, task)


def steps_in_epoch(cfg: Config, train_loader: DataLoader, train: Dataset) -> int:
    """Optimizer steps per epoch; a batch larger than the data (no step at all) is refused."""
    steps = len(train_loader) // cfg.train.grad_accum_steps
    if steps == 0:
        raise UserError(
            f"data.batch_size: {cfg.data.batch_size} is larger than the training data "
            f"({len(train)} samples); incomplete batches are dropped, so no step would run"  # type: ignore[arg-type]
        )
    return steps


LOSSES: dict[str, Callable[[Config], nn.Module]] = {
    "cross_entropy": lambda cfg: nn.CrossEntropyLoss(label_smoothing=cfg.train.label_smoothing),
    "mse": lambda cfg: nn.MSELoss(),
}


def build_loss(cfg: Config) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The configured loss: a built-in name, or an import path to a class or function."""
    name = cfg.train.loss
    if name in LOSSES:
        return LOSSES[name](cfg)
    if not is_import_path(name):
        raise UserError(
            f"train.loss: unknown loss {name!r}; built-in: {', '.join(LOSSES)}, "
            "or an import path 'package.module:attr'"
        )
    obj = resolve(name, "train.loss")
    # A class (nn.Module subclass) is instantiated; a function is used as is.
    return obj() if isinstance(obj, type) else obj


def _splits(
    cfg: Config, train: Dataset | None, val: Dataset | None, test: Dataset | None
) -> DataSplits:
    if train is None:
        if val is not None or test is not None:
            raise UserError("fit: val_data or test_data given without train_data")
        return build_data(cfg.data)
    if len(train) == 0:  # type: ignore[arg-type]
        raise UserError("fit: train_data is empty")
    sample = train[0]
    targets = targets_of(train)
    num_classes = cfg.data.num_classes
    if num_classes is None and targets is not None and not targets.is_floating_point():
        num_classes = int(targets.max()) + 1
    return DataSplits(train, val, test, num_classes, tuple(torch.as_tensor(sample[0]).shape))


@dataclass
class _Task:
    classification: bool
    num_classes: int | None


def _preflight(
    model: nn.Module, loss_fn: Callable, splits: DataSplits, device: torch.device
) -> _Task:
    """One forward pass on two training samples, in eval mode and without grad.

    Learns the number of classes from the model's output, so that labels outside it are
    refused before training instead of failing mid-run. Touches no RNG.
    """
    from torch.utils.data import default_collate

    n = min(2, len(splits.train))  # type: ignore[arg-type]
    inputs, targets = default_collate([splits.train[i][:2] for i in range(n)])
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        outputs = model(inputs.to(device))
    model.train(was_training)
    classification = _is_classification(outputs, targets)
    if not classification:
        return _Task(False, None)
    num_classes = outputs.shape[1]
    for split, ds in (("train", splits.train), ("val", splits.val), ("test", splits.test)):
        check_labels(ds, num_classes, split)
    return _Task(True, num_classes)


def _test_crash_step(place: Placement) -> int:
    step = os.environ.get("TRAINWELL_TEST_CRASH_AT_STEP")
    rank = int(os.environ.get("TRAINWELL_TEST_CRASH_RANK", "0"))
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    return int(step) if step and place.rank == rank and first_attempt else -1


def _stop_if_requested(stop: GracefulStop, place: Placement) -> None:
    """Stop at this step boundary if a signal came, on every rank at the same step."""
    if any_process(stop.requested, place):
        raise Interrupted(stop.signum or signal.SIGTERM)


def _check_all_params_got_grads(model: nn.Module, cfg: Config) -> None:
    # DDP waits for a gradient of every parameter; one that never gets any fails later
    # with a cryptic "Expected to have finished reduction". Name them instead.
    if cfg.dist.find_unused_parameters:
        return
    unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    if unused:
        shown = ", ".join(unused[:5]) + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
        raise UserError(
            f"parameters that received no gradient under DDP: {shown}; set "
            "dist.find_unused_parameters=true, or freeze them (requires_grad=False)"
        )


def _check_batch_targets(targets: torch.Tensor, num_classes: int | None) -> None:
    # Targets are still on the CPU here: reading them costs no device sync.
    if num_classes is None or targets.is_floating_point():
        return
    if bool((targets < 0).any()) or bool((targets >= num_classes).any()):
        bad = targets[(targets < 0) | (targets >= num_classes)]
        raise UserError(
            f"labels out of range: a training batch holds targets {sorted(set(bad.tolist()))[:5]} "
            f"outside [0, {num_classes}) (the model has {num_classes} outputs)"
        )


def _micro_batch(cfg: Config, place: Placement) -> int:
    parts = place.world_size * cfg.train.grad_accum_steps
    if cfg.data.batch_size % parts:
        raise UserError(
            f"data.batch_size: {cfg.data.batch_size} does not split into {place.world_size} "
            f"processes x {cfg.train.grad_accum_steps} accumulation steps"
        )
    return cfg.data.batch_size // parts


class ResumableSampler(DistributedSampler):
    """PyTorch's DistributedSampler, whose epoch can start part-way through.

    The order of an epoch is drawn from (seed, epoch) alone, also with one process, so a
    run resumed mid-epoch skips exactly the samples the checkpoint had consumed.

    Example:
        >>> s = ResumableSampler(range(8), num_replicas=1, rank=0, seed=0)
        >>> s.set_epoch(0, skip_samples=6)
        >>> len(list(s)) == len(s) == 2
        True
    """

    skip_samples = 0

    def set_epoch(self, epoch: int, skip_samples: int = 0) -> None:
        super().set_epoch(epoch)
        self.skip_samples = skip_samples

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(super().__iter__(), self.skip_samples, None)

    def __len__(self) -> int:
        return super().__len__() - self.skip_samples


def _train_loader(
    cfg: Config, dataset: Dataset, micro_batch: int, place: Placement
) -> tuple[DataLoader, ResumableSampler, torch.Generator]:
    sampler = ResumableSampler(
        dataset,
        num_replicas=place.world_size,
        rank=place.rank,
        shuffle=True,
        seed=cfg.run.seed,
        drop_last=True,
    )
    generator = torch.Generator()
    workers = cfg.data.num_workers
    loader = DataLoader(
        dataset,
        batch_size=micro_batch,
        sampler=sampler,
        drop_last=True,
        num_workers=workers,
        pin_memory=cfg.data.pin_memory and place.device.type == "cuda",
        worker_init_fn=seed_worker if workers else None,
        generator=generator,
        persistent_workers=workers > 0,
    )
    return loader, sampler, generator


def _eval_loader(cfg: Config, dataset: Dataset | None, place: Placement) -> DataLoader | None:
    if dataset is None:
        return None
    sampler = ShardSampler(len(dataset), place.rank, place.world_size)  # type: ignore[arg-type]
    return DataLoader(
        dataset,
        batch_size=cfg.data.eval_batch_size,
        sampler=sampler,
        num_workers=cfg.data.num_workers,
        pin_memory=cfg.data.pin_memory and place.device.type == "cuda",
        worker_init_fn=seed_worker if cfg.data.num_workers else None,
        # Its own generator: without one, every iteration draws a worker seed from the
        # global torch RNG, shifting the dropout masks of the training that follows
        # (and differently after a resume, which would break exact resumption).
        generator=torch.Generator().manual_seed(cfg.run.seed),
        persistent_workers=cfg.data.num_workers > 0,
    )


# ---- checkpoint state --------------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    """Every RNG's state as tensors and plain containers (loadable with weights_only)."""
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


@dataclass
class TrainState:
    """What a checkpoint holds: the stateful objects of the loop and its own counters.

    As with torchtitan's ``Stateful``, the checkpoint is just ``state_dict()``: tensors
    and plain containers only, so it loads with ``torch.load(weights_only=True)``.
    """

    cfg: Config
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    precision: Precision
    stopper: EarlyStopping
    device: torch.device
    step: int = 0
    epoch: int = 0
    epoch_start_step: int = 0
    window_steps: int = 0
    best: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The loop's running loss sums, on the device (no sync until a log point).
        self.epoch_loss = torch.zeros((), device=self.device)
        self.window_loss = torch.zeros((), device=self.device)
        # The config does not change during a run; converting it costs milliseconds.
        self.config_dict = config_mod.to_dict(self.cfg)

    def state_dict(self) -> dict[str, Any]:
        scaler = self.precision.scaler
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "step": self.step,
            "epoch": self.epoch,
            # The data order is a function of (seed, epoch), so the seed, the epoch and the
            # optimizer steps already taken in it are all it takes to replay the rest.
            "data": {
                "seed": self.cfg.run.seed,
                "epoch": self.epoch,
                "steps_into_epoch": self.step - self.epoch_start_step,
            },
            "loop": {
                "epoch_loss": self.epoch_loss.detach().cpu(),
                "window_loss": self.window_loss.detach().cpu(),
                "window_steps": self.window_steps,
            },
            "early_stop": self.stopper.state_dict(),
            "best": dict(self.best),
            "metrics": dict(self.metrics),
            "rng": rng_state(),
            "config": self.config_dict,
            "versions": {"trainwell": trainwell.__version__, "torch": str(torch.__version__)},
        }

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        """Restore everything but the RNGs (see :func:`restore_rng`)."""
        try:
            self.model.load_state_dict(state["model"])
        except RuntimeError as exc:
            detail = " ".join(str(exc).split())[:300]
            raise UserError(f"the checkpoint does not fit this model: {detail}") from None
        try:
            self.optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError) as exc:
            raise UserError(f"the checkpoint's optimizer state does not fit: {exc}") from None
        base_lrs = list(self.scheduler.base_lrs)
        self.scheduler.load_state_dict(state["scheduler"])
        # The configured lr and schedule win: a deliberate change of optim.lr or of the
        # run's length takes effect from the next step. Unchanged, this recomputes the
        # very same lr that LambdaLR would (base_lr * factor(step)).
        self.scheduler.base_lrs = base_lrs
        for group, base, fn in zip(
            self.optimizer.param_groups, base_lrs, self.scheduler.lr_lambdas
        ):
            group["initial_lr"] = base
            group["lr"] = base * fn(self.scheduler.last_epoch)
        if self.precision.scaler is not None and state.get("scaler"):
            self.precision.scaler.load_state_dict(state["scaler"])
        self.step = int(state["step"])
        self.epoch = int(state["epoch"])
        self.epoch_start_step = self.step - int(state["data"]["steps_into_epoch"])
        self.stopper.load_state_dict(state["early_stop"])
        self.best = dict(state.get("best") or {})
        self.metrics = {k: float(v) for k, v in (state.get("metrics") or {}).items()}
        loop = state.get("loop") or {}
        if "epoch_loss" in loop:
            self.epoch_loss = loop["epoch_loss"].to(device)
            self.window_loss = loop["window_loss"].to(device)
            self.window_steps = int(loop["window_steps"])


def restore_rng(state: dict[str, Any]) -> None:
    """Put every RNG back where the checkpoint found it."""
    random.setstate(state["python"])
    np_state = state["numpy"]
    np.random.set_state(
        ("MT19937", np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
         np_state["has_gauss"], np_state["cached_gaussian"])
    )  # fmt: skip
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _checkpoint(ts: TrainState, run: RunDir) -> dict[str, Any]:
    state = ts.state_dict()
    # How many metric rows belong to this state: a resume drops the rest. They are on
    # disk before the checkpoint that counts them.
    run.flush()
    state["log_rows"] = len(run.rows)
    return state


def _resume_point(
    cfg: Config, resume: str | Path | None, console: Console
) -> tuple[Path, dict[str, Any]] | None:
    if resume is None:
        return None
    if str(resume) == "auto":
        if not cfg.run.dir:
            raise UserError("--resume auto needs run.dir: the run directory to continue")
        found = find_checkpoint(Path(cfg.run.dir), say=lambda m: console.print(m, markup=False))
        if found is None:
            console.print(f"no checkpoint in {cfg.run.dir}; starting from scratch", markup=False)
        return found
    path = Path(resume)
    return path, ckpt.load_checkpoint(path)


def _save(run: RunDir, names: list[str], ts: TrainState, place: Placement) -> None:
    """Write checkpoints from rank 0 while the other ranks wait for the outcome.

    Every rank's RNG state goes in (exact resume on N processes). A write that fails (a
    full disk, no permission) stops every rank with a clear error, never a hang; the
    previous file of that name is intact.
    """
    rngs = gather_objects(rng_state(), place) if place.distributed else None
    error = None
    if place.is_main:
        state = _checkpoint(ts, run)
        if rngs is not None:
            state["rng_per_rank"] = rngs
        try:
            for name in names:
                ckpt.save_atomic(state, run.checkpoints / name)
        except OSError as exc:
            error = str(exc)
    if any_process(error is not None, place):
        raise UserError(error or "rank 0 could not write a checkpoint (see its error)")


def _open_run_dir(
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


def _finish(
    run: RunDir,
    summary: dict[str, Any],
    status: str,
    ts: TrainState,
    started: float,
    train_time: float,
    samples: int,
    doc: Doctor | None,
) -> None:
    run.flush()
    if doc is not None:
        run.write_text("doctor.json", doctor_json(doc.findings, steps=doc.steps, errors=doc.errors))
    summary.update(
        status=status,
        steps=ts.step,
        final=dict(ts.metrics),
        best=ts.best or None,
        test={k.split("/", 1)[1]: v for k, v in ts.metrics.items() if k.startswith("test/")}
        or None,
        wall_time_s=round(time.time() - started, 3),
        train_time_s=round(train_time, 3),
        samples_per_s=round(samples / train_time, 1) if train_time > 0 else None,
    )
    if run.rows:
        try:
            run.plot_curves()
        except Exception as exc:  # a plot must never lose a finished run's summary
            summary["curves_error"] = f"{type(exc).__name__}: {exc}"
    # Written last: "completed" appears only once everything else is on disk.
    run.write_summary(summary)


# ---- doctor.overfit_batch -----------------------------------------------------------------


def _overfit_run(
    cfg: Config,
    place: Placement,
    net: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    train_loader: DataLoader,
    sampler: ResumableSampler,
    generator: torch.Generator,
    num_classes: int | None,
    resume: str | Path | None,
    console: Console,
    doc: Doctor | None,
) -> FitResult:
    """``doctor.overfit_batch=true``: the overfit-one-batch check in place of training.

    Trains on the first batch of the train loader for ``train.max_steps`` steps (else
    :data:`~trainwell.engine.overfit.DEFAULT_STEPS`), with a fresh optimizer and schedule
    sized to those steps; no validation, early stopping or checkpoints. The run directory
    gets config.yaml, env.json, metrics.csv (the loss), curves.png and a summary.json
    whose ``"overfit"`` holds the verdict.
    """
    if resume is not None:
        raise UserError("doctor.overfit_batch=true is a fresh check; it does not resume a run")
    steps = cfg.train.max_steps or overfit.DEFAULT_STEPS
    config_mod.check_warmup(cfg.sched.warmup_steps, steps)
    model = unwrap(net)
    optimizer = build_optimizer(cfg.optim, model)
    scheduler = build_scheduler(cfg.sched, optimizer, steps)
    precision = Precision.build(resolve_precision(cfg.train.precision, place.device), place.device)
    # The first global batch of epoch 0, exactly as training would draw it.
    sampler.set_epoch(0)
    generator.manual_seed(epoch_seed(cfg.run.seed, 0))
    micro_batches = []
    for inputs, targets in itertools.islice(
        (b[:2] for b in train_loader), cfg.train.grad_accum_steps
    ):
        _check_batch_targets(targets, num_classes)
        micro_batches.append((inputs.to(place.device), targets.to(place.device)))

    run = _open_run_dir(
        cfg, new_run_path(cfg.run, default_name(cfg.data.name, cfg.model.name)), None, None, place
    )
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
        soft_wrap=True,
    )

    def write_doctor() -> None:
        if doc is not None:
            findings = doctor_json(doc.findings, steps=doc.steps, errors=doc.errors)
            run.write_text("doctor.json", findings)

    try:
        result = overfit.overfit_one_batch(
            net, micro_batches, loss_fn, optimizer, scheduler, precision,
            cfg.train.grad_clip, steps, place,
        )  # fmt: skip
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        if doc is not None and not interrupted:
            explain_crash(doc, exc)
        summary.update(
            status="interrupted" if interrupted else "failed",
            error=f"{type(exc).__name__}: {exc}",
        )
        write_doctor()
        run.write_summary(summary)
        raise
    for i, loss in enumerate(result.losses):
        step = i + 1
        if step % cfg.train.log_every == 0 or step in (1, steps):
            run.log(step, 0, "train", "loss", loss)
            # The schedule's own formula: LambdaLR sets base lr x factor(step).
            run.log(step, 0, "train", "lr", cfg.optim.lr * lr_factor(cfg.sched, i, steps))
    run.flush()
    write_doctor()
    summary.update(
        status="completed", steps=steps, overfit=result.to_dict(),
        wall_time_s=round(time.time() - started, 3),
    )  # fmt: skip
    try:
        run.plot_curves()
    except Exception as exc:  # a plot must never lose the check's summary
        summary["curves_error"] = f"{type(exc).__name__}: {exc}"
    # Written last: "completed" appears only once everything else is on disk.
    run.write_summary(summary)
    ratio = result.ratio
    console.print(
        f"  initial loss {result.initial_loss:.4g}   final loss {result.final_loss:.4g}   "
        f"ratio {ratio:.3g}   ({summary['wall_time_s']:.1f}s)",
        highlight=False,
    )
    # One line, unwrapped: scripts and CI logs grep for it.
    style = "green" if result.passed else "red"
    console.print(result.verdict(), style=style, highlight=False, markup=False, soft_wrap=True)
    console.print(f"run directory: {run.path}", highlight=False)
    metrics = {"overfit/initial_loss": result.initial_loss, "overfit/final_loss": result.final_loss}
    return FitResult(run_dir=run.path, metrics=metrics, summary=summary, model=model)


# ---- output ------------------------------------------------------------------------------


class _Progress:
    """A rich progress bar on a terminal; one plain line per epoch otherwise (CI logs)."""

    def __init__(self, console: Console, total: int, start: int = 0) -> None:
        self.console = console
        self.bar = None
        if console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("epoch {task.fields[epoch]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]} lr {task.fields[lr]} {task.fields[rate]}"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            self.task = self.bar.add_task(
                "train", total=total, completed=start, epoch=0, loss="-", lr="-", rate=""
            )
            self.bar.start()

    def update(self, step: int, epoch: int, loss: float, lr: float, rate: float) -> None:
        if self.bar is not None:
            self.bar.update(
                self.task,
                completed=step,
                epoch=epoch + 1,
                loss=f"{loss:.4f}",
                lr=f"{lr:.2e}",
                rate=f"{rate:,.0f} samples/s",
            )

    def epoch_line(self, epoch: int, epochs: int, step: int, metrics: dict[str, float]) -> None:
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items() if not k.startswith("test/"))
        self.console.print(f"epoch {epoch + 1}/{epochs}  step {step}  {shown}", highlight=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _dry_run(
    console: Console,
    model: nn.Module,
    loss_fn: Callable,
    precision: Precision,
    train_loader: DataLoader,
    val_loader: DataLoader | None,
    place: Placement,
    cfg: Config,
    micro_batch: int,
    steps_per_epoch: int,
    total_steps: int,
) -> None:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    inputs, targets = next(iter(train_loader))[:2]
    model.train()
    with precision.autocast():
        outputs = model(inputs.to(place.device))
        loss = loss_fn(outputs, targets.to(place.device))
    loss.backward()
    grads = sum(1 for p in model.parameters() if p.grad is not None)
    model.zero_grad(set_to_none=True)
    lines = [
        f"model        {type(model).__name__}: {total:,} parameters ({trainable:,} trainable)",
        f"device       {place.device}, precision {precision.name}",
        f"batch        global {cfg.data.batch_size} = {micro_batch} per micro-step x "
        f"{cfg.train.grad_accum_steps} accum x {place.world_size} processes",
        f"schedule     {steps_per_epoch} steps/epoch, {total_steps} optimizer steps",
        f"train batch  inputs {tuple(inputs.shape)} {inputs.dtype}, targets "
        f"{tuple(targets.shape)} {targets.dtype}",
        f"outputs      {tuple(outputs.shape)} {outputs.dtype}; loss {loss.item():.4f}; "
        f"{grads} of {sum(1 for _ in model.parameters())} parameter tensors got gradients",
    ]
    if val_loader is not None:
        v_inputs, v_targets = next(iter(val_loader))[:2]
        model.eval()
        with torch.inference_mode(), precision.autocast():
            v_out = model(v_inputs.to(place.device))
            v_loss = loss_fn(v_out, v_targets.to(place.device))
        model.train()
        lines.append(
            f"eval batch   inputs {tuple(v_inputs.shape)}, outputs {tuple(v_out.shape)}; "
            f"loss {v_loss.item():.4f}"
        )
    else:
        lines.append("eval batch   no validation data")
    console.print("[bold]dry run[/]: one training and one eval batch went through", highlight=False)
    for line in lines:
        console.print("  " + line, highlight=False, markup=False)


__all__ = ["FitResult", "build_loss", "evaluate", "fit", "rng_state"]
