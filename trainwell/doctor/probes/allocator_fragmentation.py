"""The ``allocator-fragmentation`` probe."""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

from trainwell.doctor.events import (
    Reporter,
    StepEvent,
)
from trainwell.doctor.findings import Finding


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


def _cuda_memory() -> tuple[int, int] | None:
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()


class AllocatorProbe:
    """CUDA memory sampled every few steps, as the seeds' MemoryMonitor does: allocated
    climbing is a leak, reserved climbing while allocated stays flat is fragmentation.

    A leak is reported here only when no holder was named already (the holder scan is
    the precise signal, and the one that works on the CPU too). Without CUDA there is
    nothing to sample and the probe stays silent.
    """

    EVERY = 10
    WINDOW = 12

    def __init__(self, sample: Any = _cuda_memory) -> None:
        self.sample = sample
        self.samples: deque[tuple[int, int]] = deque(maxlen=self.WINDOW)

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        if event.step % self.EVERY or event.frame is None:
            return
        value = self.sample()
        if value is None:
            doc.unsubscribe(self, "on_step")  # no CUDA: nothing to sample, ever
            return
        self.samples.append(value)
        named = any(f.code in ("graph-retained", "tensor-accumulation") for f in doc.findings)
        if climbing(list(self.samples)) and not named:
            first, last = self.samples[0][0], self.samples[-1][0]
            doc.add(
                Finding(
                    code="tensor-accumulation",
                    severity="warning",
                    file=event.frame.f_code.co_filename,
                    line=event.frame.f_lineno,
                    message=f"allocated device memory grows step over step ({first:,} -> "
                    f"{last:,} bytes over {len(self.samples) * self.EVERY} steps); the "
                    "doctor could not name what holds it",
                    why="something keeps device tensors from every step: memory runs out",
                    fix="look for tensors kept across steps (lists, dicts, attributes, "
                    "caches); keep .item() floats or .detach().cpu() copies instead",
                    evidence={"samples": [list(s) for s in self.samples]},
                )
            )
        elif fragmentation(list(self.samples)):
            allocated, reserved = self.samples[-1]
            doc.add(
                Finding(
                    code="allocator-fragmentation",
                    severity="warning",
                    file=event.frame.f_code.co_filename,
                    line=event.frame.f_lineno,
                    message=f"reserved memory grows ({self.samples[0][1]:,} -> {reserved:,} "
                    f"bytes) while allocated memory stays flat (~{allocated:,} bytes)",
                    why="the caching allocator cannot reuse its fragmented blocks and keeps "
                    "reserving more: an out-of-memory can come with free memory left",
                    fix="set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; keep tensor "
                    "shapes steady (pad variable-length batches to a few sizes)",
                    evidence={"samples": [list(s) for s in self.samples]},
                )
            )
