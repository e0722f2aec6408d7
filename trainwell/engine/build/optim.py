"""Optimizers and learning-rate schedules, each with its own small config.

Weight decay is applied to weight matrices and conv kernels only: biases and
normalization weights (every parameter with fewer than two dimensions) are exempt, as in
nanoGPT and most modern recipes, since decaying them hurts and buys nothing.

The schedule is a function of the optimizer step (not the epoch), so warmup and decay
mean the same thing whatever the batch size or data set length.

``optim.name`` and ``sched.name`` also take an import path (``torch.optim:RMSprop``,
``torch.optim.lr_scheduler:OneCycleLR``, a user's factory) with ``optim.kwargs`` /
``sched.kwargs``: the optimizer gets the same decay/no-decay parameter groups and
``lr=optim.lr``; the scheduler gets the optimizer, and ``total_steps`` when it takes one.

``optim.groups`` sets an lr, a weight decay or any optimizer argument per part of the
model (:mod:`trainwell.engine.build.param_groups`); every schedule scales each group's own lr.
Frozen parameters are in the optimizer too, so that unfreezing them later trains them.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trainwell._options import check, check_int, check_number, option
from trainwell.engine.build.param_groups import build_groups, check_extra_keys, check_groups
from trainwell.engine.build.sched_step import mark_flat
from trainwell.errors import UserError
from trainwell.imports import call_with, is_import_path, resolve

OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("cosine", "constant", "step")


@dataclass
class OptimConfig:
    """The optimizer."""

    name: str = option(
        "adamw", "adamw, adam, sgd, or import path 'package.module:attr' of an optimizer class"
    )
    lr: float = option(3e-3, "peak learning rate")
    weight_decay: float = option(
        0.05, "decoupled (adamw) or L2 weight decay; not applied to biases and norm weights"
    )
    betas: list[float] = option([0.9, 0.999], "Adam betas")
    eps: float = option(1e-8, "Adam epsilon")
    momentum: float = option(0.9, "SGD momentum")
    nesterov: bool = option(True, "SGD Nesterov momentum (needs momentum > 0)")
    kwargs: dict[str, Any] = option(
        {}, "more keyword arguments for the optimizer (an import path's, or a built-in's)"
    )
    groups: list[dict[str, Any]] = option(
        [],
        "parameter groups: a list of {params: GLOB (or a list of globs over parameter "
        "names), name, lr | lr_scale, weight_decay, other optimizer arguments}; first match "
        "wins, the rest keep optim.lr and optim.weight_decay",
    )

    def __post_init__(self) -> None:
        _check_name(self.name, "optim.name", OPTIMIZERS)
        # Bounds wide enough for any recipe; beyond them training only diverges or
        # divides by zero, far from the config line that caused it.
        check_number(self.lr, "optim.lr", 0, 10, low_open=True)
        check_number(self.weight_decay, "optim.weight_decay", 0, 10, high_open=True)
        check(
            len(self.betas) == 2,
            "optim.betas",
            f"must be two numbers in [0, 1); got {list(self.betas)}",
        )
        for beta in self.betas:
            check_number(beta, "optim.betas", 0, 1, high_open=True)
        check_number(self.eps, "optim.eps", 0, 1, low_open=True, high_open=True)
        check_number(self.momentum, "optim.momentum", 0, 1, high_open=True)
        check(
            not (self.name == "sgd" and self.nesterov and self.momentum == 0),
            "optim.nesterov",
            "Nesterov momentum needs optim.momentum > 0",
        )
        # An import path's arguments are checked when it is imported (at the build).
        check_groups(self.groups, _BUILTIN_CLASSES.get(self.name))


_BUILTIN_CLASSES: dict[str, type] = {
    "adamw": torch.optim.AdamW,
    "adam": torch.optim.Adam,
    "sgd": torch.optim.SGD,
}


# The default warmup: a twentieth of the run, as the articles' configs and the HF Trainer's
# examples have it. It keeps Adam's first steps (its second-moment estimate still near zero)
# from taking full-size updates; measured on the default digits run in benchmarks/warmup.py.
WARMUP_RATIO = 0.05


@dataclass
class SchedConfig:
    """The learning-rate schedule, stepped once per optimizer step."""

    name: str = option(
        "cosine",
        "cosine (to a floor), constant, step, or import path 'package.module:attr' of a "
        "scheduler, stepped every optimizer step (ReduceLROnPlateau: every evaluation)",
    )
    warmup_steps: int = option(
        0, "linear warmup from 0 over this many optimizer steps (0: sched.warmup_ratio decides)"
    )
    warmup_ratio: float = option(
        WARMUP_RATIO,
        "linear warmup over this share of the run's optimizer steps, when sched.warmup_steps "
        "is 0 (0: no warmup); built-in schedules only",
    )
    min_lr_ratio: float = option(0.01, "cosine floor, as a fraction of the peak lr")
    step_size: int = option(1000, "step schedule: multiply the lr by gamma every this many steps")
    gamma: float = option(0.1, "step schedule: the factor")
    kwargs: dict[str, Any] = option({}, "keyword arguments for a scheduler given by import path")

    def __post_init__(self) -> None:
        _check_name(self.name, "sched.name", SCHEDULES)
        check(
            not (is_import_path(self.name) and self.warmup_steps),
            "sched.warmup_steps",
            "applies to the built-in schedules; put the warmup in your scheduler "
            "(e.g. torch.optim.lr_scheduler:SequentialLR) or use sched.name=cosine",
        )
        check_int(self.warmup_steps, "sched.warmup_steps", low=0)
        check_number(self.warmup_ratio, "sched.warmup_ratio", 0, 1, high_open=True)
        check(
            not (is_import_path(self.name) and self.warmup_ratio not in (0.0, WARMUP_RATIO)),
            "sched.warmup_ratio",
            "applies to the built-in schedules; put the warmup in your scheduler "
            "(e.g. torch.optim.lr_scheduler:SequentialLR) or use sched.name=cosine",
        )
        check_number(self.min_lr_ratio, "sched.min_lr_ratio", 0, 1)
        check_int(self.step_size, "sched.step_size")
        check_number(self.gamma, "sched.gamma", 0, 1, low_open=True)


def _check_name(name: str, key: str, choices: tuple[str, ...]) -> None:
    check(
        name in choices or is_import_path(name),
        key,
        f"expected one of {', '.join(choices)} or an import path 'package.module:attr'; "
        f"got {name!r}",
    )


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed (tensors of 2+ dims) and not decayed (biases, norm weights).

    Frozen parameters are in them too (the optimizer skips them while they get no
    gradient; unfrozen, they train).

    Example:
        >>> groups = param_groups(nn.Linear(3, 2), 0.1)
        >>> [len(g["params"]) for g in groups], [g["weight_decay"] for g in groups]
        ([1, 1], [0.1, 0.0])
    """
    return build_groups(model, [], 0.0, weight_decay)


def build_optimizer(cfg: OptimConfig, model: nn.Module) -> torch.optim.Optimizer:
    """The configured optimizer over all of ``model``'s parameters, frozen ones included
    (in their ``optim.groups`` group), so that unfreezing one later trains it.

    Example:
        >>> cfg = OptimConfig(name="torch.optim:RMSprop", lr=0.01, kwargs={"alpha": 0.9})
        >>> opt = build_optimizer(cfg, nn.Linear(3, 2))
        >>> type(opt).__name__, opt.defaults["alpha"], [g["weight_decay"] for g in opt.param_groups]
        ('RMSprop', 0.9, [0.05, 0.0])
    """
    groups: list[Any] = build_groups(model, cfg.groups, cfg.lr, cfg.weight_decay)
    kwargs = dict(cfg.kwargs)
    if cfg.name in OPTIMIZERS:
        try:
            return _builtin_optimizer(cfg, groups, kwargs)
        except (TypeError, ValueError) as exc:
            raise UserError(f"optim.kwargs: {cfg.name} refused them: {exc}") from None
    factory = resolve(cfg.name, "optim.name")
    for i, group in enumerate(cfg.groups):
        check_extra_keys(group, f"optim.groups[{i}]", factory)
    if not _accepts(factory, "weight_decay"):
        if cfg.groups:
            raise UserError(f"optim.groups: {cfg.name} takes no per-group weight decay (one "
                            "parameter group only); remove optim.groups")  # fmt: skip
        # No per-group decay to give (LBFGS, a user's): one group, as the optimizer expects.
        groups = list(model.parameters())
    try:
        optimizer = call_with(factory, {"lr": cfg.lr, **kwargs}, {}, "optim.kwargs", args=(groups,))
    except (TypeError, ValueError) as exc:
        raise UserError(f"optim.name: {cfg.name} refused its arguments: {exc}") from None
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise UserError(
            f"optim.name: {cfg.name!r} returned {type(optimizer).__name__}, not a "
            "torch.optim.Optimizer"
        )
    return optimizer


def _builtin_optimizer(
    cfg: OptimConfig, groups: list[dict], kwargs: dict[str, Any]
) -> torch.optim.Optimizer:
    if cfg.name == "sgd":
        return torch.optim.SGD(
            groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov, **kwargs
        )
    adam = torch.optim.AdamW if cfg.name == "adamw" else torch.optim.Adam
    return adam(groups, lr=cfg.lr, betas=(cfg.betas[0], cfg.betas[1]), eps=cfg.eps, **kwargs)


def _accepts(factory: Any, name: str) -> bool:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return True
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def lr_factor(cfg: SchedConfig, step: int, total_steps: int) -> float:
    """Multiplier of the peak lr for optimizer step ``step`` (0-based) of ``total_steps``.

    Example:
        >>> cfg = SchedConfig(warmup_steps=10, min_lr_ratio=0.0)
        >>> lr_factor(cfg, 0, 110), lr_factor(cfg, 9, 110), round(lr_factor(cfg, 60, 110), 3)
        (0.1, 1.0, 0.5)
    """
    warmup = warmup_length(cfg, total_steps)
    if step < warmup:
        return (step + 1) / warmup
    if cfg.name == "constant":
        return 1.0
    if cfg.name == "step":
        return cfg.gamma ** ((step - warmup) // cfg.step_size)
    decay_steps = max(1, total_steps - warmup)
    progress = min(1.0, (step - warmup) / decay_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine


def warmup_length(cfg: SchedConfig, total_steps: int) -> int:
    """The warmup's optimizer steps: ``sched.warmup_steps`` when set, else
    ``sched.warmup_ratio`` of ``total_steps`` (rounded down; none for an import path).

    Example:
        >>> warmup_length(SchedConfig(), 1000), warmup_length(SchedConfig(warmup_steps=7), 1000)
        (50, 7)
        >>> warmup_length(SchedConfig(warmup_ratio=0.0), 1000)
        0
    """
    if cfg.warmup_steps or is_import_path(cfg.name):
        return cfg.warmup_steps
    return int(cfg.warmup_ratio * total_steps)


def build_scheduler(
    cfg: SchedConfig, optimizer: torch.optim.Optimizer, total_steps: int
) -> torch.optim.lr_scheduler.LRScheduler | torch.optim.lr_scheduler.ReduceLROnPlateau:
    """The configured schedule; its state saves and loads with the checkpoint.

    A built-in name is a LambdaLR following :func:`lr_factor`. An import path is called
    with the optimizer, ``sched.kwargs``, and ``total_steps`` (the run's optimizer
    steps) when it takes that argument and the kwargs do not set it.

    Example:
        >>> opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
        >>> cfg = SchedConfig(name="torch.optim.lr_scheduler:OneCycleLR", kwargs={"max_lr": 1.0})
        >>> build_scheduler(cfg, opt, total_steps=100).total_steps
        100
    """
    if not is_import_path(cfg.name):
        # A plain function (LambdaLR's state_dict leaves functions out); a constant
        # schedule is marked flat after its warmup, so the loop can skip torch's step.
        warmup = warmup_length(cfg, total_steps)
        factor = mark_flat(lambda step: lr_factor(cfg, step, total_steps),
                           warmup if cfg.name == "constant" else None)  # fmt: skip
        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    factory = resolve(cfg.name, "sched.name")
    inject = {"total_steps": total_steps}
    kwargs = per_group_peaks(dict(cfg.kwargs), optimizer)
    try:
        scheduler = call_with(factory, kwargs, inject, "sched.kwargs", args=(optimizer,))
    except (TypeError, ValueError) as exc:
        raise UserError(f"sched.name: {cfg.name} refused its arguments: {exc}") from None
    if not hasattr(scheduler, "step") or not hasattr(scheduler, "state_dict"):
        raise UserError(
            f"sched.name: {cfg.name!r} returned {type(scheduler).__name__}, not an lr scheduler"
        )
    return scheduler


# Scheduler arguments that set the lr itself and take one value per group.
_PEAKS = ("max_lr", "base_lr")


def per_group_peaks(kwargs: dict[str, Any], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """A scalar ``max_lr`` / ``base_lr`` (OneCycleLR, CyclicLR) as one value per group,
    scaled as each group's lr is to the optimizer's default lr (``optim.lr``), so that
    ``optim.groups`` keeps its ratios under such a schedule too.

    Example:
        >>> opt = torch.optim.SGD([{"params": [nn.Parameter(torch.ones(1))]},
        ...                        {"params": [nn.Parameter(torch.ones(1))], "lr": 0.25}], lr=0.5)
        >>> per_group_peaks({"max_lr": 1.0}, opt)
        {'max_lr': [1.0, 0.5]}
    """
    base = optimizer.defaults.get("lr")
    if not isinstance(base, (int, float)) or not base:
        return kwargs
    ratios = [g["lr"] / base for g in optimizer.param_groups]
    if all(r == 1 for r in ratios):
        return kwargs
    for key in _PEAKS:
        value = kwargs.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            kwargs[key] = [value * r for r in ratios]
    return kwargs


def steps_per_eval(scheduler: Any) -> bool:
    """True for a scheduler stepped with the monitored metric after each evaluation."""
    return isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
