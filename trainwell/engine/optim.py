"""Optimizers and learning-rate schedules, each with its own small config.

Weight decay is applied to weight matrices and conv kernels only: biases and
normalization weights (every parameter with fewer than two dimensions) are exempt, as in
nanoGPT and most modern recipes, since decaying them hurts and buys nothing.

The schedule is a function of the optimizer step (not the epoch), so warmup and decay
mean the same thing whatever the batch size or data set length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from trainwell._options import check, check_choice, option

OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("cosine", "constant", "step")


@dataclass
class OptimConfig:
    """The optimizer."""

    name: str = option("adamw", "adamw, adam or sgd")
    lr: float = option(3e-3, "peak learning rate")
    weight_decay: float = option(
        0.05, "decoupled (adamw) or L2 weight decay; not applied to biases and norm weights"
    )
    betas: list[float] = option([0.9, 0.999], "Adam betas")
    eps: float = option(1e-8, "Adam epsilon")
    momentum: float = option(0.9, "SGD momentum")
    nesterov: bool = option(True, "SGD Nesterov momentum (needs momentum > 0)")

    def __post_init__(self) -> None:
        check_choice(self.name, "optim.name", OPTIMIZERS)
        check(self.lr > 0, "optim.lr", f"must be positive; got {self.lr}")
        check(
            self.weight_decay >= 0, "optim.weight_decay", f"must be >= 0; got {self.weight_decay}"
        )
        check(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            "optim.betas",
            f"must be two numbers in [0, 1); got {list(self.betas)}",
        )
        check(self.momentum >= 0, "optim.momentum", f"must be >= 0; got {self.momentum}")
        check(
            not (self.name == "sgd" and self.nesterov and self.momentum == 0),
            "optim.nesterov",
            "Nesterov momentum needs optim.momentum > 0",
        )


@dataclass
class SchedConfig:
    """The learning-rate schedule, stepped once per optimizer step."""

    name: str = option("cosine", "cosine (to a floor), constant, or step")
    warmup_steps: int = option(0, "linear warmup from 0 over this many optimizer steps")
    min_lr_ratio: float = option(0.01, "cosine floor, as a fraction of the peak lr")
    step_size: int = option(1000, "step schedule: multiply the lr by gamma every this many steps")
    gamma: float = option(0.1, "step schedule: the factor")

    def __post_init__(self) -> None:
        check_choice(self.name, "sched.name", SCHEDULES)
        check(
            self.warmup_steps >= 0, "sched.warmup_steps", f"must be >= 0; got {self.warmup_steps}"
        )
        check(
            0 <= self.min_lr_ratio <= 1,
            "sched.min_lr_ratio",
            f"must be in [0, 1]; got {self.min_lr_ratio}",
        )
        check(self.step_size > 0, "sched.step_size", f"must be positive; got {self.step_size}")
        check(0 < self.gamma <= 1, "sched.gamma", f"must be in (0, 1]; got {self.gamma}")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed (tensors of 2+ dims) and not decayed (biases, norm weights).

    Example:
        >>> groups = param_groups(nn.Linear(3, 2), 0.1)
        >>> [len(g["params"]) for g in groups], [g["weight_decay"] for g in groups]
        ([1, 1], [0.1, 0.0])
    """
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def build_optimizer(cfg: OptimConfig, model: nn.Module) -> torch.optim.Optimizer:
    """The configured optimizer over ``model``'s trainable parameters."""
    groups = param_groups(model, cfg.weight_decay)
    if cfg.name == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    if cfg.name == "adam":
        return torch.optim.Adam(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov)


def lr_factor(cfg: SchedConfig, step: int, total_steps: int) -> float:
    """Multiplier of the peak lr for optimizer step ``step`` (0-based) of ``total_steps``.

    Example:
        >>> cfg = SchedConfig(warmup_steps=10, min_lr_ratio=0.0)
        >>> lr_factor(cfg, 0, 110), lr_factor(cfg, 9, 110), round(lr_factor(cfg, 60, 110), 3)
        (0.1, 1.0, 0.5)
    """
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.name == "constant":
        return 1.0
    if cfg.name == "step":
        return cfg.gamma ** ((step - cfg.warmup_steps) // cfg.step_size)
    decay_steps = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / decay_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine


def build_scheduler(
    cfg: SchedConfig, optimizer: torch.optim.Optimizer, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR following :func:`lr_factor`; its state saves and loads with the checkpoint."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(cfg, step, total_steps)
    )
