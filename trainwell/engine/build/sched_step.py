"""The scheduler's per-step call, without torch's machinery where the schedule is flat.

``LambdaLR.step()`` runs about fifteen Python calls per optimizer step (the lambda per
group, a context manager, a list per group's lr), which on a tiny model is a percent of
the step. Past its warmup, the engine's ``sched.name=constant`` schedule sets every
group's lr to its peak, which it already holds: the step then only counts. The fast
path counts (``last_epoch``, ``_step_count``, exactly as ``step()`` would) and leaves the
lrs alone; anything else (a warmup step, an lr a callback changed, a group added at run
time, any other scheduler) takes the real ``step()``. The scheduler's state is the same
either way, so checkpoints and resumes do not see the difference.

Example:
    >>> import torch
    >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    >>> factor = lambda step: 1.0
    >>> factor.flat_after = 0  # the engine marks its constant schedule so
    >>> sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    >>> step = scheduler_step(sched)
    >>> opt.step(); step(); opt.step(); step()
    >>> sched.last_epoch, sched.get_last_lr()
    (2, [0.1])
    >>> "step" in vars(opt)  # torch's wrapper on opt.step is gone after the first step
    False
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# The attribute on a LambdaLR's lambda: the first step from which it returns 1.0 for good.
FLAT_AFTER = "flat_after"


def mark_flat(factor: Callable[[int], float], flat_after: int | None) -> Callable[[int], float]:
    """Note on ``factor`` that it returns 1.0 from step ``flat_after`` on (``None``: never
    known). An attribute of a plain function: ``LambdaLR.state_dict`` still leaves it out."""
    if flat_after is not None:
        setattr(factor, FLAT_AFTER, flat_after)
    return factor


def scheduler_step(scheduler: Any) -> Callable[[], None]:
    """What to call after each optimizer step: ``scheduler.step``, or for a LambdaLR whose
    lambdas are all marked flat (:func:`mark_flat`), the same with a fast path once flat."""
    flat_after = _flat_after(scheduler)
    if flat_after is None:
        return scheduler.step
    groups = scheduler.optimizer.param_groups

    def step() -> None:
        bases = scheduler.base_lrs
        # _step_count 1 is the step where torch checks the call order and may warn.
        if (scheduler._step_count > 1 and scheduler.last_epoch + 1 >= flat_after
                and len(groups) == len(bases)):  # fmt: skip
            # Every group's lr is its peak (a float): what a flat LambdaLR step would set.
            # A loop here, not a helper: this runs every step.
            for group, base in zip(groups, bases):
                lr = group["lr"]
                if type(lr) is not float or lr != base:
                    break
            else:
                scheduler._step_count += 1
                scheduler.last_epoch += 1
                return
        scheduler.step()
        if scheduler._step_count > 1:
            drop_step_tracking(scheduler.optimizer)

    return step


def flat_counter(scheduler: Any) -> Callable[[int], None] | None:
    """``count(n)``: ``n`` steps of a flat schedule at once, as ``n`` fast steps of
    :func:`scheduler_step` would count them, where the schedule is flat from here on (a
    LambdaLR marked flat, past its flat start and its first step, every group at its
    peak lr); ``None`` otherwise. For a run of steps where nothing can change an lr
    between two counts (the loop's lean steps, counted before anything reads them).

    Example:
        >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        >>> sched = torch.optim.lr_scheduler.LambdaLR(opt, mark_flat(lambda step: 1.0, 0))
        >>> flat_counter(sched) is None  # torch's first step() is still to come
        True
        >>> opt.step(); scheduler_step(sched)(); count = flat_counter(sched)
        >>> count(5); sched.last_epoch, sched._step_count, sched.get_last_lr()
        (6, 7, [0.1])
    """
    flat_after = _flat_after(scheduler)
    if flat_after is None or scheduler._step_count < 2 or scheduler.last_epoch + 1 < flat_after:
        return None
    groups, bases = scheduler.optimizer.param_groups, scheduler.base_lrs
    if len(groups) != len(bases):
        return None
    if any(type(g["lr"]) is not float or g["lr"] != base for g, base in zip(groups, bases)):
        return None

    def count(n: int) -> None:
        scheduler._step_count += n
        scheduler.last_epoch += n

    return count


def steps_until_countable(scheduler: Any) -> int | None:
    """Scheduler steps still to take before :func:`flat_counter` can count them (0: now);
    ``None`` for a schedule never known flat.

    Example:
        >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        >>> sched = torch.optim.lr_scheduler.LambdaLR(opt, mark_flat(lambda step: 1.0, 5))
        >>> steps_until_countable(sched)
        4
    """
    flat_after = _flat_after(scheduler)
    if flat_after is None:
        return None
    # flat_counter's conditions: torch's first step() taken, the next step() flat.
    return max(0, max(1, flat_after - 1) - scheduler.last_epoch)


def _flat_after(scheduler: Any) -> int | None:
    """The step from which ``scheduler`` (a LambdaLR whose lambdas are all marked flat)
    sets every lr to its peak; ``None`` for any other scheduler."""
    if type(scheduler) is not torch.optim.lr_scheduler.LambdaLR:
        return None
    marked = [getattr(fn, FLAT_AFTER, None) for fn in scheduler.lr_lambdas]
    starts = [int(s) for s in marked if s is not None]
    if not starts or len(starts) != len(marked):
        return None
    return max(starts)


def drop_step_tracking(optimizer: torch.optim.Optimizer) -> None:
    """Take off the wrapper torch's LRScheduler put on ``optimizer.step``: it notes that the
    optimizer stepped, which only the scheduler's first ``step()`` reads (its call-order
    warning). Past that, the optimizer's own ``step`` runs without it: a Python call fewer
    per optimizer step. Nothing happens where there is no such wrapper."""
    wrapper = vars(optimizer).get("step")
    if getattr(wrapper, "_wrapped_by_lr_sched", False):
        del optimizer.step
