"""One optimizer step taken the engine's way, for the diagnostics that run beside the loop.

The overfit-one-batch check (:mod:`trainwell.engine.overfit`) and the learning-rate range
test (:mod:`trainwell.engine.lr_find`) must train exactly as ``trainwell train`` does, or
what they report would not carry over to the real run. The main loop in
:mod:`trainwell.engine.loop` spells the same sequence out inline, so that it reads top to
bottom with its own bookkeeping (running sums, label checks, DDP checks) in between.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from trainwell.engine.distributed import no_sync
from trainwell.engine.precision import Precision

Batch = tuple[torch.Tensor, torch.Tensor]


def train_step(
    net: nn.Module,
    micro_batches: Sequence[Batch],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    precision: Precision,
    grad_clip: float,
    params: Sequence[torch.Tensor],
) -> torch.Tensor:
    """One optimizer step over ``micro_batches`` (already on the device), as the loop takes it.

    zero grads -> per micro-batch: forward under autocast, loss / accum, backward (through
    the GradScaler for fp16; DDP syncs on the last micro-batch only) -> unscale -> clip
    ``params`` to ``grad_clip`` (0: off) -> optimizer step. The scheduler is the caller's.

    Returns:
        The step's mean loss, detached and still on the device: reading it is the
        caller's choice of sync point.

    Example:
        >>> net = nn.Linear(2, 2)
        >>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
        >>> batch = (torch.ones(4, 2), torch.tensor([0, 1, 0, 1]))
        >>> p = Precision.build("fp32", torch.device("cpu"))
        >>> params = list(net.parameters())
        >>> loss = train_step(net, [batch], nn.CrossEntropyLoss(), opt, p, 1.0, params)
        >>> loss.requires_grad, loss.ndim
        (False, 0)
    """
    assert micro_batches, "train_step needs at least one micro-batch"
    optimizer.zero_grad(set_to_none=True)
    accum = len(micro_batches)
    total: torch.Tensor | None = None
    for micro, (inputs, targets) in enumerate(micro_batches):
        with no_sync(net, sync=micro == accum - 1):
            with precision.autocast():
                loss = loss_fn(net(inputs), targets)
            # Mean over the whole batch: each micro-batch adds 1/accum.
            scaled = loss / accum if accum > 1 else loss
            if precision.scaler is not None:
                precision.scaler.scale(scaled).backward()
            else:
                scaled.backward()
        total = scaled.detach().float() if total is None else total + scaled.detach().float()
    if precision.scaler is not None:
        # Unscale first so that clipping sees the true gradient norm.
        precision.scaler.unscale_(optimizer)
    if grad_clip > 0:
        nn.utils.clip_grad_norm_(params, grad_clip)
    if precision.scaler is not None:
        precision.scaler.step(optimizer)
        precision.scaler.update()
    else:
        optimizer.step()
    assert total is not None
    return total
