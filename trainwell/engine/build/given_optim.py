"""The run's optimizer and scheduler: the config's, or those handed to ``fit``.

``fit(optimizer=...)`` takes an optimizer built over the model passed in, or a factory
``fn(model) -> optimizer`` called with the model the engine trains (on its device, after
FSDP has sharded it: under ``dist.strategy=fsdp`` only a factory works, since sharding
re-creates the parameters). ``fit(scheduler=...)`` takes a scheduler of that optimizer or a
factory ``fn(optimizer) -> scheduler``; without one, the config's schedule scales the
optimizer's groups. Either way the engine steps them (the scheduler once per optimizer
step; ``ReduceLROnPlateau`` after each evaluation), saves them in every checkpoint and
resumes them, and groups added during the run work
(:mod:`trainwell.engine.checkpointing.added_groups`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainwell.config import Config
from trainwell.engine.build.optim import build_optimizer, build_scheduler
from trainwell.engine.checkpointing.added_groups import track_added_groups
from trainwell.engine.distributed.ddp_unfrozen import sync_unfrozen_later
from trainwell.engine.distributed.fsdp import is_sharded
from trainwell.errors import UserError


def optimization(
    cfg: Config,
    model: nn.Module,
    total_steps: int,
    optimizer: Any = None,
    scheduler: Any = None,
    say: Callable[[str], None] = print,
    net: nn.Module | None = None,
) -> tuple[torch.optim.Optimizer, Any]:
    """The optimizer and scheduler of a run: ``optimizer`` / ``scheduler`` (objects or
    factories) where given, else the config's. ``net`` is the module the loop calls (the
    DDP wrapper on several processes).

    Example:
        >>> from trainwell.config import load_config
        >>> net = nn.Linear(2, 2)
        >>> opt, sched = optimization(load_config(), net, 10,
        ...                           optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
        >>> type(opt).__name__, type(sched).__name__
        ('SGD', 'LambdaLR')
    """
    if optimizer is None:
        opt = build_optimizer(cfg.optim, model)
    else:
        opt = _given_optimizer(optimizer, model)
        if cfg.optim.groups:
            say("[yellow]warning[/]: optim.groups is not used: fit was given its own "
                "optimizer (set its parameter groups there)")  # fmt: skip
    if scheduler is None:
        sched = build_scheduler(cfg.sched, opt, total_steps)
    else:
        sched = _given_scheduler(scheduler, opt)
        if cfg.sched.warmup_steps:
            say("[yellow]warning[/]: sched.warmup_steps is not used: fit was given its own "
                "scheduler")  # fmt: skip
    track_added_groups(opt, sched)
    if net is not None:
        sync_unfrozen_later(net, say)  # DDP: parts unfrozen later are all-reduced too
    return opt, sched


def _given_optimizer(given: Any, model: nn.Module) -> torch.optim.Optimizer:
    if isinstance(given, torch.optim.Optimizer):
        opt = given
    elif callable(given):
        opt = given(model)
        if not isinstance(opt, torch.optim.Optimizer):
            raise UserError(f"fit(optimizer=): the factory returned {type(opt).__name__}, "
                            "not a torch.optim.Optimizer")  # fmt: skip
    else:
        raise UserError(f"fit(optimizer=): expected a torch.optim.Optimizer or a factory "
                        f"fn(model) -> optimizer; got {type(given).__name__}")  # fmt: skip
    own = {id(p) for p in model.parameters()}
    foreign = sum(id(p) not in own for g in opt.param_groups for p in g["params"])
    if foreign:
        raise UserError(_foreign(foreign, model, given))
    return opt


def _foreign(count: int, model: nn.Module, given: Any) -> str:
    if is_sharded(model) and isinstance(given, torch.optim.Optimizer):
        return (
            "fit(optimizer=): dist.strategy=fsdp re-creates the parameters when it shards "
            "the model, so an optimizer built before cannot train them; pass a factory, "
            "fit(optimizer=lambda model: torch.optim.AdamW(model.parameters()))"
        )
    return (f"fit(optimizer=): {count} of the optimizer's parameters are not the model's "
            "(an optimizer built over another model, or over a copy of it); build it over "
            "the model given to fit, or pass a factory fn(model) -> optimizer")  # fmt: skip


def _given_scheduler(given: Any, optimizer: torch.optim.Optimizer) -> Any:
    sched = given
    if not _is_scheduler(given):
        if not callable(given):
            raise UserError(f"fit(scheduler=): expected an lr scheduler or a factory "
                            f"fn(optimizer) -> scheduler; got {type(given).__name__}")  # fmt: skip
        sched = given(optimizer)
        if not _is_scheduler(sched):
            raise UserError(f"fit(scheduler=): the factory returned {type(sched).__name__}, "
                            "not an lr scheduler (with step and state_dict)")  # fmt: skip
    if getattr(sched, "optimizer", optimizer) is not optimizer:
        raise UserError("fit(scheduler=): the scheduler belongs to another optimizer than the "
                        "run's; pass a factory fn(optimizer) -> scheduler")  # fmt: skip
    return sched


def _is_scheduler(obj: Any) -> bool:
    return callable(getattr(obj, "step", None)) and callable(getattr(obj, "state_dict", None))
