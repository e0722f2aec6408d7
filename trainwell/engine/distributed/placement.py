"""Where the process runs: device, rank and world size, decided in one place.

The loop only ever sees a :class:`Placement`. One process (world size 1) is the plain
case; under a launcher (``trainwell train --nproc N``, or ``torchrun ... -m trainwell
train``) the launcher's environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``/``PORT``) says where this process belongs, and PyTorch's own
``torch.distributed`` does the rest: the process group (NCCL on CUDA, gloo on CPU),
DDP, and the launcher's restarts.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Sampler

from trainwell._options import check_choice, option
from trainwell.engine.distributed.compiling import submodule
from trainwell.engine.distributed.fsdp import is_sharded, shard
from trainwell.errors import UserError


@dataclass
class DistConfig:
    """Distributed training settings (used when running on several processes)."""

    backend: str = option("auto", "auto (nccl on CUDA, gloo on CPU), nccl or gloo")
    sync_batchnorm: bool = option(False, "convert BatchNorm layers to SyncBatchNorm")
    find_unused_parameters: bool = option(
        False, "let DDP handle parameters that get no gradient (slower)"
    )
    strategy: str = option(
        "ddp",
        "ddp (every process holds the whole model) or fsdp (each holds 1/N of the "
        "weights, gradients and optimizer state; sharded checkpoints)",
    )
    fsdp_modules: list[str] = option(
        [],
        "fsdp: the blocks to shard one by one (default: the children of the model's "
        "largest ModuleList/Sequential); the root is sharded last",
    )
    fsdp_reshard_after_forward: bool = option(
        True,
        "fsdp: free each block's gathered weights after its forward (less memory, "
        "one more all-gather in backward)",
    )
    fsdp_cpu_offload: bool = option(
        False, "fsdp: keep the parameter shards and optimizer state in CPU memory"
    )

    def __post_init__(self) -> None:
        check_choice(self.backend, "dist.backend", ("auto", "nccl", "gloo"))
        check_choice(self.strategy, "dist.strategy", ("ddp", "fsdp"))


@dataclass
class Placement:
    """The device and the process's place in the group."""

    device: torch.device
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(requested: str, local_rank: int = 0) -> torch.device:
    """``auto`` picks CUDA (this process's GPU), then MPS, then the CPU.

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
    """
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank % torch.cuda.device_count())
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"run.device: {requested} asked for, but torch sees no CUDA device")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UserError(
            f"run.device: {requested} asked for, but there are "
            f"{torch.cuda.device_count()} CUDA devices"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UserError("run.device: mps asked for, but MPS is not available here")
    return device


def setup(requested_device: str, cfg: DistConfig | None = None) -> Placement:
    """The placement of this process; joins the process group under a launcher.

    With ``WORLD_SIZE`` > 1 in the environment, initializes ``torch.distributed`` from
    it (``env://``) on the backend that fits the device. Call :func:`teardown` at the end.
    """
    cfg = cfg or DistConfig()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Placement(device=resolve_device(requested_device))
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(requested_device, local_rank)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
    backend = cfg.backend
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl" and device.type != "cuda":
        raise UserError("dist.backend: nccl needs CUDA devices; use gloo on the CPU")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        # The launcher's store outlives a restart of the group, and so would the old
        # processes' addresses under the default keys: a new worker could read a dead
        # peer's address and hang connecting to it. A prefix per attempt keeps them apart.
        store, _, _ = next(dist.rendezvous("env://"))
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.PrefixStore(f"trainwell/attempt-{attempt}", store)
        dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size)
    return Placement(device=device, rank=rank, world_size=world_size, local_rank=local_rank)


def barrier(place: Placement) -> None:
    """Wait for every process (nothing to wait for on one)."""
    if place.distributed:
        dist.barrier()


def teardown() -> None:
    """Leave the process group (safe to call when none was joined)."""
    if dist.is_available() and dist.is_initialized():
        # The run's DDP module sits in reference cycles, and its reducer holds the group:
        # left to the interpreter's exit, gloo's threads end during finalization and abort
        # the process now and then (SIGABRT, "terminate called without an active
        # exception"). Collected here, the group's last holder goes while all is alive.
        gc.collect()
        dist.destroy_process_group()


def wrap(
    model: nn.Module,
    place: Placement,
    cfg: DistConfig,
    precision: str = "fp32",
    say: Callable[[str], None] = print,
) -> nn.Module:
    """The module the loop calls: ``model`` itself, DDP around it on several processes,
    or ``model`` sharded in place by FSDP2 (``dist.strategy=fsdp``).

    The raw ``model`` stays the one whose ``state_dict`` is saved, so checkpoints load
    the same with or without DDP.
    """
    if cfg.strategy == "fsdp":
        return _shard(model, place, cfg, precision, say)
    if not place.distributed:
        return model
    if cfg.sync_batchnorm:
        if place.device.type != "cuda":
            raise UserError(
                "dist.sync_batchnorm needs CUDA devices: PyTorch's DDP accepts SyncBatchNorm "
                "only in GPU modules; on the CPU, leave it off (each process normalizes its "
                "own micro-batch)"
            )
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    device_ids = [place.device.index] if place.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(
        model, device_ids=device_ids, find_unused_parameters=cfg.find_unused_parameters
    )


def _shard(
    model: nn.Module, place: Placement, cfg: DistConfig, precision: str, say: Callable
) -> nn.Module:
    if not place.distributed:
        for name in cfg.fsdp_modules:  # a typo is news on one process too (shard() checks N)
            submodule(model, name, "dist.fsdp_modules")
        say("note: dist.strategy=fsdp on one process: nothing to shard, training unsharded "
            "(checkpoints are still sharded folders, resumable on N processes)")  # fmt: skip
        return model
    if cfg.sync_batchnorm or cfg.find_unused_parameters:
        raise UserError("dist.sync_batchnorm and dist.find_unused_parameters are DDP's; "
                        "FSDP needs neither (set them false with dist.strategy=fsdp)")  # fmt: skip
    blocks = shard(model, place.world_size, place.device, modules=list(cfg.fsdp_modules),
                   precision=precision, reshard_after_forward=cfg.fsdp_reshard_after_forward,
                   cpu_offload=cfg.fsdp_cpu_offload, say=say)  # fmt: skip
    if blocks:
        shown = ", ".join(blocks[:4]) + (", ..." if len(blocks) > 4 else "")
        say(f"fsdp: {len(blocks)} blocks and the root sharded over {place.world_size} "
            f"processes ({shown})")  # fmt: skip
    return model


def unwrap(net: nn.Module) -> nn.Module:
    """The module inside torch.compile's and DDP's wrappers (or ``net`` itself)."""
    net = getattr(net, "_orig_mod", net)  # torch.compile's OptimizedModule
    return net.module if isinstance(net, nn.parallel.DistributedDataParallel) else net


def no_sync(net: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """DDP's ``no_sync`` (FSDP's gradient sync turned off) for accumulation micro-steps:
    gradients are reduced only on the last micro-step of an optimizer step."""
    if sync:
        return contextlib.nullcontext()
    inner = getattr(net, "_orig_mod", net)
    if isinstance(inner, nn.parallel.DistributedDataParallel):
        return inner.no_sync()
    if is_sharded(inner):
        return _fsdp_no_sync(inner)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _fsdp_no_sync(net: Any) -> Iterator[None]:
    # Sharded gradients of the micro-steps accumulate unreduced; the last one reduces all.
    net.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        net.set_requires_gradient_sync(True)


def all_reduce_sum(values: Sequence[float], place: Placement) -> list[float]:
    """Sum plain numbers over all processes (one collective); identity on one process."""
    if not place.distributed:
        return list(values)
    t = torch.tensor(list(values), dtype=torch.float64, device=_comm_device(place))
    dist.all_reduce(t)
    return t.tolist()


def any_process(flag: bool, place: Placement) -> bool:
    """True on every process if ``flag`` is true on any (a stop signal, an error)."""
    if not place.distributed:
        return flag
    t = torch.tensor([1 if flag else 0], device=_comm_device(place))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def broadcast_object(obj: Any, place: Placement) -> Any:
    """Rank 0's ``obj`` on every process."""
    if not place.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj: Any, place: Placement) -> list[Any]:
    """Every process's ``obj``, in rank order, on every process."""
    if not place.distributed:
        return [obj]
    out: list[Any] = [None] * place.world_size
    dist.all_gather_object(out, obj)
    return out


def _comm_device(place: Placement) -> torch.device:
    # NCCL only moves CUDA tensors; gloo only CPU ones.
    return place.device if dist.get_backend() == "nccl" else torch.device("cpu")


class ShardSampler(Sampler[int]):
    """Rank ``r`` of ``w`` gets indices ``r, r + w, r + 2w, ...``: every sample exactly once.

    For evaluation: unlike DistributedSampler, nothing is padded or repeated, so metrics
    summed over ranks count each sample once.

    Example:
        >>> list(ShardSampler(5, rank=1, world_size=2))
        [1, 3]
    """

    def __init__(self, length: int, rank: int, world_size: int) -> None:
        self.length, self.rank, self.world_size = length, rank, world_size

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.length, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.length, self.world_size))
