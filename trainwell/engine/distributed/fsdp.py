"""Fully sharded data parallel (``dist.strategy=fsdp``): PyTorch's FSDP2 over a device mesh.

Each process keeps 1/N of every parameter, of its gradient and of the optimizer state.
A block's full parameters exist only while it runs: ``fully_shard`` all-gathers them
before its forward (and again before its backward, with ``reshard_after_forward``) and
reduce-scatters its gradients after. Sharding the model's repeated blocks one by one is
what keeps the peak low (one block gathered at a time, the next one's gather overlapping
this one's compute); the root is sharded last, for whatever is left (embeddings, heads).

The engine does not change for it: parameters become DTensors, which the optimizer,
``clip_grad_norm_`` (a global norm over all shards) and the scheduler take as they are.
What differs is said where it happens: accumulation micro-steps skip the gradient
reduction (:func:`trainwell.engine.distributed.placement.no_sync`), every rank runs the same number
of forwards in evaluation (the gathers are collectives), and checkpoints are sharded
(:mod:`trainwell.engine.checkpointing.sharded`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn

from trainwell.engine.distributed.compiling import repeated_blocks, submodule
from trainwell.errors import UserError

if TYPE_CHECKING:  # imported when a mesh is built: torch.distributed's extras load late
    from torch.distributed.device_mesh import DeviceMesh


def shard(
    model: nn.Module,
    world_size: int,
    device: torch.device,
    *,
    modules: list[str],
    precision: str,
    reshard_after_forward: bool = True,
    cpu_offload: bool = False,
    say: Callable[[str], None] = print,
) -> list[str]:
    """``fully_shard`` the chosen blocks, then the root; returns the blocks' names.

    The blocks are ``modules`` by name, or else the model's :func:`repeated_blocks`; with
    none, the root alone is sharded (said through ``say``). Rank 0's weights are
    broadcast first, as DDP does, so every rank shards the same model whatever its seed.
    With ``precision`` bf16 or fp16, FSDP's own policy gathers the parameters in that
    dtype and reduces gradients in fp32.
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    if precision == "fp16":
        raise UserError(
            "train.precision=fp16 with dist.strategy=fsdp: FSDP2 trains in bf16 (no loss "
            "scaling of sharded gradients here); use train.precision=bf16 or fp32"
        )
    blocks = [(name, submodule(model, name, "dist.fsdp_modules")) for name in modules]
    if not modules:
        blocks = repeated_blocks(model)
        if not blocks:
            say("note: dist.strategy=fsdp: the model has no ModuleList or Sequential of "
                "blocks and dist.fsdp_modules is empty; sharding the root module only "
                "(every parameter is gathered at once: the peak is the whole model)")  # fmt: skip
    _broadcast_from_rank0(model)
    mesh = _mesh(device, world_size)
    options: dict = {"mesh": mesh, "reshard_after_forward": reshard_after_forward}
    if precision == "bf16" and _has_batchnorm(model):
        say("note: fsdp: BatchNorm keeps fp32 running statistics that bf16 weights cannot "
            "meet; weights are gathered in fp32 and autocast computes in bf16")  # fmt: skip
    elif precision == "bf16":
        options["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    if cpu_offload:
        if device.type == "cpu":
            say("note: dist.fsdp_cpu_offload: the run is on the CPU already; nothing to offload")
        else:
            options["offload_policy"] = CPUOffloadPolicy()
    for _, block in blocks:
        fully_shard(block, **options)
    fully_shard(model, **options)
    return [name for name, _ in blocks]


def is_sharded(net: nn.Module) -> bool:
    """Whether ``net`` (or the module inside torch.compile's wrapper) is an FSDP2 module.

    Example:
        >>> is_sharded(nn.Linear(2, 2))
        False
    """
    net = getattr(net, "_orig_mod", net)
    return hasattr(net, "set_requires_gradient_sync") and hasattr(net, "reshard")


def _has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _mesh(device: torch.device, world_size: int) -> DeviceMesh:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (world_size,))


@torch.no_grad()
def _broadcast_from_rank0(model: nn.Module) -> None:
    # FSDP shards what each rank holds: ranks with different initial weights (a model built
    # without a seed) would train a patchwork of them. DDP broadcasts rank 0's; so do we.
    # The model is on this process's device already, the one the backend moves.
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.data, src=0)
