"""DDP and parts unfrozen during the run: their gradients all-reduced all the same.

DDP all-reduces the gradients of the parameters that were trainable when it was built,
and only those: a backbone frozen then and unfrozen later (a fine-tuning callback, a
resume that restores an unfrozen backbone) would train on each process's own gradients,
and the processes' weights would drift apart in silence. So each parameter frozen when
DDP is built gets a hook that, once it receives gradients, averages them over the
processes on the micro-step where DDP synchronizes (never inside ``no_sync``), before
clipping and the optimizer step see them. One collective per such parameter and step:
slower than DDP's buckets, and exact.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from trainwell.errors import UserError


def sync_unfrozen_later(net: nn.Module, say: Callable[[str], None] = print) -> int:
    """Hook the parameters of a DDP ``net`` that are frozen now; returns how many.

    Example:
        >>> sync_unfrozen_later(nn.Linear(2, 2))  # not DDP: nothing to do
        0
    """
    if not isinstance(net, nn.parallel.DistributedDataParallel):
        return 0
    frozen = [p for p in net.module.parameters() if not p.requires_grad]
    world = dist.get_world_size()
    for p in frozen:
        # torch refuses a hook on a tensor without requires_grad: set it for the call.
        p.requires_grad_(True)
        p.register_post_accumulate_grad_hook(functools.partial(_average, net, world))
        p.requires_grad_(False)
    if frozen:
        say(f"note: {len(frozen)} parameter tensors are frozen as DDP starts; once unfrozen, "
            "their gradients are averaged over the processes apart from DDP's buckets "
            "(exact, but slower: unfreeze before fit where you can)")  # fmt: skip
    return len(frozen)


def _average(net: nn.parallel.DistributedDataParallel, world: int, param: torch.Tensor) -> None:
    # DDP's own flag: False inside no_sync (the accumulation micro-steps).
    if net.require_backward_grad_sync and param.grad is not None:
        dist.all_reduce(param.grad)
        param.grad.div_(world)


def check_all_params_got_grads(model: nn.Module) -> None:
    """After a DDP run's first backward (``find_unused_parameters`` off): every trainable
    parameter got a gradient, else a :class:`~trainwell.errors.UserError` names them.

    DDP waits for a gradient of every parameter; one that never gets any fails later with
    a cryptic "Expected to have finished reduction".

    Example:
        >>> net = nn.Linear(2, 1)
        >>> net(torch.ones(1, 2)).sum().backward()
        >>> check_all_params_got_grads(net)  # both got one: nothing to say
    """
    unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    if unused:
        shown = ", ".join(unused[:5]) + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
        raise UserError(
            f"parameters that received no gradient under DDP: {shown}; set "
            "dist.find_unused_parameters=true, or freeze them (requires_grad=False)"
        )
