"""Device memory sampled every few steps, and what its series says: allocated memory
climbing (a leak) or reserved memory climbing while allocated stays flat (a fragmenting
caching allocator). What the ``tensor-accumulation`` and ``allocator-fragmentation``
probes judge by, as the seeds' MemoryMonitor does."""

from __future__ import annotations

import torch


def fragmentation(samples: list[tuple[int, int]]) -> bool:
    """True when reserved memory keeps growing while allocated memory stays flat.

    ``samples`` are (allocated, reserved) byte counts taken every few steps. A caching
    allocator that reserves more and more for the same live bytes is fragmenting.

    Example:
        >>> fragmentation([(100, 200 + 10 * i) for i in range(10)])
        True
        >>> fragmentation([(100 + 10 * i, 200 + 10 * i) for i in range(10)])
        False
    """
    if len(samples) < 8:
        return False
    allocated = [a for a, _ in samples]
    reserved = [r for _, r in samples]
    flat = max(allocated) <= 1.05 * max(min(allocated), 1)
    rises = sum(b > a for a, b in zip(reserved, reserved[1:]))
    grows = reserved[-1] >= 1.25 * max(reserved[0], 1) and rises >= len(reserved) // 2
    return flat and grows


def climbing(samples: list[tuple[int, int]]) -> bool:
    """True when allocated memory rises at most samples and by a fifth overall: a leak.

    Example:
        >>> climbing([(100 + 30 * i, 400) for i in range(10)])
        True
        >>> climbing([(100, 400)] * 10)
        False
    """
    if len(samples) < 8:
        return False
    allocated = [a for a, _ in samples]
    rises = sum(b > a for a, b in zip(allocated, allocated[1:]))
    return rises >= 0.8 * (len(allocated) - 1) and allocated[-1] >= 1.2 * max(allocated[0], 1)


def cuda_memory() -> tuple[int, int] | None:
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
