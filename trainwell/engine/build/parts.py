"""The parts of a run built from the config and what ``fit`` was given: data, model, steps.

Shared by ``fit``, the overfit check and lr-find, so that all three train the same model
from the same initial weights (the seeding below is part of the contract) with the same
step function.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

from trainwell.config import Config
from trainwell.data import DataSplits, build_data, make_splits
from trainwell.engine.build.dry_checks import check_collate
from trainwell.engine.build.preflight import Task, preflight
from trainwell.engine.distributed.placement import Placement
from trainwell.engine.loading.loaders import LoaderSettings, first_samples, loader_settings
from trainwell.engine.loading.seeding import seed_everything, set_deterministic
from trainwell.engine.step.step_fn import (
    LossFn,
    LossStep,
    StepFn,
    Steps,
    bind_kwargs,
    ignore_index_of,
)
from trainwell.errors import UserError
from trainwell.imports import resolve
from trainwell.models import build_model


@dataclass
class Given:
    """The objects passed to :func:`trainwell.fit` in place of the config's choices."""

    model: nn.Module | None = None
    train_data: Any = None
    val_data: Any = None
    test_data: Any = None
    loss_fn: LossFn | None = None
    step_fn: StepFn | None = None
    eval_step_fn: StepFn | None = None
    callbacks: list[Any] | None = None
    # An optimizer (or fn(model) -> optimizer) and a scheduler (or fn(optimizer) -> one).
    optimizer: Any = None
    scheduler: Any = None
    metrics: dict[str, Any] | None = None


@dataclass
class Parts:
    """What :func:`build_parts` builds."""

    splits: DataSplits
    model: nn.Module
    steps: Steps
    task: Task
    loaders: LoaderSettings
    name: str


def build_parts(
    cfg: Config,
    place: Placement,
    given: Given | None = None,
    quiet: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> Parts:
    """Data splits, model (on ``place.device``) and step functions, seeded as ``fit`` does.

    The initial weights depend on ``run.seed`` alone, so a tool that builds its parts
    here (``trainwell lr-find``) starts from the very weights ``trainwell train`` would.
    A dry step on the first samples (:func:`~trainwell.engine.build.preflight.preflight`) runs
    under ``quiet()`` (the doctor's muting) and changes nothing.

    Example:
        >>> from trainwell.config import load_config
        >>> cfg = load_config(overrides=["data.name=synthetic", "model.name=mlp"])
        >>> parts = build_parts(cfg, Placement(torch.device("cpu")))
        >>> type(parts.model).__name__, parts.task.num_classes, parts.steps.default
        ('Sequential', 10, True)
    """
    given = given or Given()
    set_deterministic(cfg.run.deterministic)
    seed_everything(cfg.run.seed)
    steps = build_steps(cfg, given, place.device)
    splits = _splits(cfg, given, steps)
    # Seeded just before the model is built, so its initial weights depend only on the seed.
    seed_everything(cfg.run.seed)
    model = given.model
    if model is None:
        model = build_model(cfg.model, splits.num_classes, splits.input_shape or ())
    model = model.to(place.device)
    loaders = loader_settings(cfg.data, cfg.train.grad_accum_steps, cfg.run.seed, splits)
    collate = loaders.collate
    with quiet():
        # Two samples: the cheapest batch that still runs batch norm in training mode.
        task = preflight(model, steps, splits, place.device, lambda: first_samples(
            splits.train, 2, collate))  # fmt: skip
        check_collate(splits.train, collate)  # lengths that differ past the first two
    return Parts(splits, model, steps, task, loaders, _run_name(cfg, given, model))


def _splits(cfg: Config, given: Given, steps: Steps) -> DataSplits:
    if given.train_data is None:
        if given.val_data is not None or given.test_data is not None:
            raise UserError("fit: val_data or test_data given without train_data")
        return build_data(cfg.data, steps.default, ignore_index_of(steps.loss_fn))
    return make_splits(given.train_data, given.val_data, given.test_data, cfg.data.num_classes,
                       "train_data")  # fmt: skip


def build_steps(cfg: Config, given: Given, device: torch.device) -> Steps:
    """The train and eval steps: the user's (``fit(step_fn=)``, ``train.step``) or the loss's."""
    step = given.step_fn or bind_kwargs(_resolve_fn(cfg.train.step, "train.step"),
                                        cfg.train.step_kwargs, "train.step_kwargs")  # fmt: skip
    eval_step = given.eval_step_fn or bind_kwargs(_resolve_fn(
        cfg.train.eval_step, "train.eval_step"), cfg.train.eval_step_kwargs,
        "train.eval_step_kwargs")  # fmt: skip
    if step is None:
        loss_fn = given.loss_fn or build_loss(cfg, device)
        return Steps(LossStep(loss_fn), eval_step or LossStep(loss_fn, accuracy=True), loss_fn)
    if given.loss_fn is not None:
        raise UserError(
            "fit: loss_fn and a step function were both given; the step computes the loss "
            "(call your loss inside it)"
        )
    return Steps(step, eval_step or step)


def _resolve_fn(path: str, key: str) -> Any:
    if not path:
        return None
    fn = resolve(path, key)
    if not callable(fn):
        raise UserError(f"{key}: {path!r} is a {type(fn).__name__}, not a function")
    return fn


_BUILTIN_LOSSES: dict[str, Callable[..., nn.Module]] = {
    "cross_entropy": nn.CrossEntropyLoss,
    "mse": nn.MSELoss,
    "l1": nn.L1Loss,
    "smooth_l1": nn.SmoothL1Loss,
    "bce_with_logits": nn.BCEWithLogitsLoss,
}
# Loss arguments that torch wants as tensors; YAML gives lists.
_TENSOR_ARGS = ("weight", "pos_weight")


def build_loss(cfg: Config, device: torch.device | None = None) -> LossFn:
    """The configured loss with ``train.loss_kwargs``: a built-in name or an import path.

    Example:
        >>> from trainwell.config import load_config
        >>> cfg = load_config(overrides=["train.loss=bce_with_logits",
        ...                              "train.loss_kwargs={pos_weight: [2.0, 1.0]}"])
        >>> build_loss(cfg).pos_weight
        tensor([2., 1.])
    """
    kwargs = {
        k: torch.as_tensor(v, dtype=torch.float32) if k in _TENSOR_ARGS and isinstance(v, list)
        else v
        for k, v in cfg.train.loss_kwargs.items()
    }  # fmt: skip
    name = cfg.train.loss
    if name == "cross_entropy":
        kwargs.setdefault("label_smoothing", cfg.train.label_smoothing)
    factory = _BUILTIN_LOSSES.get(name) or resolve(name, "train.loss")
    if not callable(factory):
        raise UserError(f"train.loss: {name!r} is a {type(factory).__name__}, not a loss")
    if isinstance(factory, type):
        try:
            loss = factory(**kwargs)
        except TypeError as exc:
            raise UserError(f"train.loss_kwargs: {name} refused them: {exc}") from None
    else:
        loss = functools.partial(factory, **kwargs) if kwargs else factory
    # Class weights must sit where the outputs are.
    return loss.to(device) if isinstance(loss, nn.Module) and device is not None else loss


def _run_name(cfg: Config, given: Given, model: nn.Module) -> str:
    """``<data>-<model>``: the config's names, or the classes of the objects given."""
    from trainwell.engine.run_dir.directory import default_name

    data = cfg.data.name
    if given.train_data is not None:
        inner = given.train_data
        while isinstance(inner, (Subset, DataLoader)):
            inner = inner.dataset
        data = type(inner).__name__
    model_name = type(model).__name__ if given.model is not None else cfg.model.name
    return default_name(data, model_name)
