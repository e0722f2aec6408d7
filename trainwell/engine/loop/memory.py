"""Memory figures at log points: the CUDA allocator's counters, or on CPU the process's
resident memory and the bytes of live tensors.

Read at log points only and never a device sync: the CUDA counters are host-side. On CPU
no allocator keeps count (``torch.cuda`` counters read 0 there), so live tensors are
counted by walking the garbage collector's objects, which takes up to a tenth of a
second; that walk runs only while it costs under 1% of the time since the last one, the
first one after 10 s.
"""

from __future__ import annotations

import gc
import os
import sys
import time

import torch

MB = 2**20
# The tensor walk may take at most this share of the wall time between two walks.
WALK_BUDGET = 0.01
# The first walk waits this long: it costs about 0.1 s in a process with torch loaded,
# 1% of 10 s. Walking at the first log point of a short run cost it 20% of its steps.
FIRST_WALK_S = 10.0


class MemoryLog:
    """``mem/...`` figures in MB for the log point at hand.

    Example:
        >>> figures = MemoryLog(torch.device("cpu"), first_walk_s=0).sample()
        >>> figures["mem/rss_mb"] > 0 and "mem/tensor_mb" in figures
        True
    """

    def __init__(self, device: torch.device, first_walk_s: float = FIRST_WALK_S) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self._next_walk = time.perf_counter() + first_walk_s

    def sample(self) -> dict[str, float]:
        if self.cuda:
            return {
                "mem/cuda_allocated_mb": torch.cuda.memory_allocated(self.device) / MB,
                "mem/cuda_reserved_mb": torch.cuda.memory_reserved(self.device) / MB,
                "mem/cuda_peak_mb": torch.cuda.max_memory_allocated(self.device) / MB,
            }
        figures = {}
        rss = resident_bytes()
        if rss is not None:
            figures["mem/rss_mb"] = rss / MB
        now = time.perf_counter()
        if now >= self._next_walk:
            figures["mem/tensor_mb"] = live_tensor_bytes() / MB
            cost = time.perf_counter() - now
            self._next_walk = now + cost / WALK_BUDGET
        return figures


def resident_bytes() -> int | None:
    """The process's resident set size now (Linux), or its peak elsewhere; None if unknown."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def live_tensor_bytes() -> int:
    """Bytes of the distinct CPU storages that live tensors (and parameters) hold."""
    seen: set[int] = set()
    total = 0
    # Plain tensors and parameters only: subclasses (the fake tensors torch.export and
    # torch.compile cache, DTensors wrapping a local tensor) hold no memory of their own,
    # and asking a fake one for its data pointer warns. type(), not isinstance(): some
    # lazy module attributes warn when asked their __class__.
    kinds = (torch.Tensor, torch.nn.Parameter)
    for obj in gc.get_objects():
        if type(obj) not in kinds or obj.device.type != "cpu":
            continue
        try:
            storage = obj.untyped_storage()
            ptr = storage.data_ptr()
        except (RuntimeError, NotImplementedError):
            # No memory of its own: sparse tensors, and the fake tensors torch.export and
            # torch.compile keep in their caches.
            continue
        if ptr and ptr not in seen:
            seen.add(ptr)
            total += storage.nbytes()
    return total
