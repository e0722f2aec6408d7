"""Where the process runs: device, rank and world size, decided in one place.

The loop only ever sees a :class:`Placement`. Today trainwell runs one process (world
size 1); multi-process DDP through torchrun plugs in here without touching the loop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from trainwell._options import check_choice, option
from trainwell.errors import UserError


@dataclass
class DistConfig:
    """Distributed training settings (used when running on several processes)."""

    backend: str = option("auto", "auto (nccl on CUDA, gloo on CPU), nccl or gloo")
    sync_batchnorm: bool = option(False, "convert BatchNorm layers to SyncBatchNorm")
    find_unused_parameters: bool = option(
        False, "let DDP handle parameters that get no gradient (slower)"
    )

    def __post_init__(self) -> None:
        check_choice(self.backend, "dist.backend", ("auto", "nccl", "gloo"))


@dataclass
class Placement:
    """The device and the process's place in the group."""

    device: torch.device
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_device(requested: str) -> torch.device:
    """``auto`` picks CUDA, then MPS, then the CPU; an explicit choice must exist.

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
    """
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
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


def setup(requested_device: str) -> Placement:
    """The placement of this process. Refuses a multi-process launch for now."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        raise UserError(
            f"this process was launched as one of {world_size} (WORLD_SIZE); multi-process "
            "training is not available in this version of trainwell: run one process"
        )
    return Placement(device=resolve_device(requested_device))
