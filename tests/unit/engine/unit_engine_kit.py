"""Tiny real parts for the engine's unit tests: a Trainer, a Checkpointer, a run directory,
built by hand the way ``trainwell/engine/fit.py`` (``_assemble``, ``_train``) wires them,
never through ``fit`` or the CLI.

The model is an ``nn.Linear(3, 1)`` trained with plain SGD on a list-backed DataLoader of
8 samples (batch 2: 4 optimizer steps per epoch), so that the expected weights can be
computed by hand (:func:`sgd_by_hand`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from trainwell.config import Config, load_config
from trainwell.engine.checkpointing.checkpointer import Checkpointer
from trainwell.engine.distributed.placement import Placement
from trainwell.engine.loading.loaders import LoaderSettings, TrainData
from trainwell.engine.loop.assembly import Assembly
from trainwell.engine.loop.evaluate import Evaluator
from trainwell.engine.loop.progress import Progress, make_console
from trainwell.engine.loop.trainer import Trainer
from trainwell.engine.run_dir.directory import CsvLogger, RunDir
from trainwell.engine.state.callbacks import Callbacks
from trainwell.engine.state.early_stopping import EarlyStopping
from trainwell.engine.state.loop_state import LoopState
from trainwell.engine.state.signals import GracefulStop
from trainwell.engine.step.anatomy import StepClock
from trainwell.engine.step.precision import Precision
from trainwell.engine.step.step_fn import LossStep
from trainwell.engine.step.stepper import Stepper
from trainwell.loggers import Loggers

CPU = torch.device("cpu")
BATCH = 2


def samples(n: int = 8, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` (x, y) pairs, x in R^3, y in R^1: a list a DataLoader batches as it is."""
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(n, 3, generator=g)
    ys = torch.randn(n, 1, generator=g)
    return [(xs[i], ys[i]) for i in range(n)]


def loader(data: Sequence[Any], batch: int = BATCH) -> DataLoader:
    # In order, no shuffling: the hand-written SGD walks the same batches.
    return DataLoader(list(data), batch_size=batch, shuffle=False)


def lr_factor(step: int) -> float:
    """The schedule of every test: the lr halves at each step (LambdaLR's factor)."""
    return 0.5**step


class FakeLogger:
    """A logger with every optional method, recording what it was given."""

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.state = dict(state or {"run_id": "fake-1"})

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.calls.append(("log_metrics", (step, dict(metrics))))

    def log_config(self, config: dict[str, Any]) -> None:
        self.calls.append(("log_config", config))

    def flush(self) -> None:
        self.calls.append(("flush", None))

    def close(self) -> None:
        self.calls.append(("close", None))

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state)


@dataclass
class Kit:
    """What a test needs of a built Trainer: the Trainer and its pieces."""

    trainer: Trainer
    run: RunDir
    model: nn.Linear
    optimizer: torch.optim.Optimizer
    scheduler: Any
    logger: FakeLogger
    loop: LoopState
    stop: GracefulStop
    data: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)


def config(*overrides: str) -> Config:
    return load_config(overrides=["train.log_every=1", "train.epochs=2", *overrides])


def make_model(seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(3, 1)


def make_trainer(
    run_path: Path,
    *overrides: str,
    callbacks: Sequence[Any] = (),
    step_fn: Callable[..., Any] | None = None,
    val: bool = True,
    patience: int = 0,
    lr: float = 0.1,
    factor: Callable[[int], float] = lr_factor,
    data: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    stop: GracefulStop | None = None,
) -> Kit:
    """A Trainer over 8 samples (4 steps an epoch), wired as ``fit._assemble`` does."""
    cfg = config(*overrides)
    place = Placement(CPU)
    model = make_model()
    data = data if data is not None else samples()
    train = TrainData.build(loader(data), LoaderSettings(batch_size=BATCH), place)
    assert train.steps_per_epoch is not None
    total = cfg.train.epochs * train.steps_per_epoch
    total = min(total, cfg.train.max_steps) if cfg.train.max_steps else total
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    precision = Precision.build("fp32", CPU)
    monitor = "val/loss" if val else "train/loss"
    stopper = EarlyStopping(monitor, "min", patience, 0.0)
    loop = LoopState(CPU)
    cbs = Callbacks(list(callbacks))
    clock = StepClock(CPU)
    stepper = Stepper(model, step_fn or LossStep(nn.MSELoss()), optimizer, precision, 0.0, CPU,
                      clock=clock)  # fmt: skip
    stop = stop or GracefulStop()
    plan = Assembly(
        cfg=cfg, place=place, model=model, data=train, stepper=stepper, clock=clock,
        scheduler=scheduler, stopper=stopper, monitor=monitor, loop=loop,
        checkpointer=Checkpointer(cfg, place, model, optimizer, scheduler, precision, stopper,
                                  loop, cbs),
        evaluator=Evaluator(model, LossStep(nn.MSELoss()), precision, place),
        val_loader=loader(samples(4, seed=1)) if val else None,
        total_steps=total, stop=stop, callbacks=cbs,
    )  # fmt: skip
    run = RunDir.create(run_path)
    progress = Progress(make_console(quiet=True), total, loop.step, epoch=lambda: loop.epoch)
    fake = FakeLogger()
    loggers = Loggers(
        [("csv", CsvLogger(run, epoch=lambda: loop.epoch)), ("progress", progress),
         ("fake", fake)],
        say=lambda line: None, essential=("csv", "progress"),
    )  # fmt: skip
    trainer = Trainer.start(plan, run=run, progress=progress, loggers=loggers)
    return Kit(trainer, run, model, optimizer, scheduler, fake, loop, stop, data)


def sgd_by_hand(
    weight: np.ndarray,
    bias: np.ndarray,
    data: list[tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    lr: float = 0.1,
    factor: Callable[[int], float] = lr_factor,
    batch: int = BATCH,
) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` SGD steps of MSE on ``Linear(3, 1)``, in float64 with the gradient written
    out (no autograd): dL/dW = 2/N (yhat - y)^T x, dL/db = 2/N sum(yhat - y)."""
    w, b = weight.astype(np.float64).copy(), bias.astype(np.float64).copy()
    xs = np.stack([x.numpy() for x, _ in data]).astype(np.float64)
    ys = np.stack([y.numpy() for _, y in data]).astype(np.float64)
    per_epoch = len(data) // batch
    for k in range(steps):
        i = (k % per_epoch) * batch
        x, y = xs[i : i + batch], ys[i : i + batch]
        err = x @ w.T + b - y  # (N, 1)
        grad_w = 2.0 / (batch * 1) * err.T @ x
        grad_b = 2.0 / (batch * 1) * err.sum(axis=0)
        step_lr = lr * factor(k)
        w, b = w - step_lr * grad_w, b - step_lr * grad_b
    return w, b


def mse(weight: np.ndarray, bias: np.ndarray, data: list[tuple[torch.Tensor, torch.Tensor]]
        ) -> float:  # fmt: skip
    xs = np.stack([x.numpy() for x, _ in data]).astype(np.float64)
    ys = np.stack([y.numpy() for _, y in data]).astype(np.float64)
    return float(((xs @ weight.T + bias - ys) ** 2).mean())
