"""The ``allocator-fragmentation`` probe."""

from __future__ import annotations

from collections import deque
from typing import Any

from trainwell.doctor.events import Reporter, StepEvent
from trainwell.doctor.findings import Finding
from trainwell.doctor.memory import cuda_memory, fragmentation


class AllocatorFragmentationProbe:
    """``allocator-fragmentation``: CUDA memory sampled every ``EVERY`` steps (a host-side
    counter: no sync), reserved memory climbing while allocated memory stays flat.
    Without CUDA there is nothing to sample and the probe stops listening."""

    EVERY = 10
    WINDOW = 12

    def __init__(self, sample: Any = cuda_memory) -> None:
        self.sample = sample
        self.samples: deque[tuple[int, int]] = deque(maxlen=self.WINDOW)

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        # Asleep between samples: those steps cost nothing.
        wake = (event.step // self.EVERY + 1) * self.EVERY
        if event.step % self.EVERY:
            doc.unsubscribe(self, "on_step", until=wake)
            return
        value = self.sample() if event.frame is not None else None
        if value is None:
            doc.unsubscribe(self, "on_step")  # no CUDA (or no user's loop): nothing to sample
            return
        doc.unsubscribe(self, "on_step", until=wake)
        self.samples.append(value)
        if not fragmentation(list(self.samples)):
            return
        allocated, reserved = self.samples[-1]
        frame = event.frame
        if frame is None:
            return
        doc.add(
            Finding(
                code="allocator-fragmentation",
                severity="warning",
                file=frame.f_code.co_filename,
                line=frame.f_lineno,
                message=f"reserved memory grows ({self.samples[0][1]:,} -> {reserved:,} "
                f"bytes) while allocated memory stays flat (~{allocated:,} bytes)",
                why="the caching allocator cannot reuse its fragmented blocks and keeps "
                "reserving more: an out-of-memory can come with free memory left",
                fix="set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (under trainwell "
                "train: run.cuda_alloc_conf=expandable_segments:True); keep tensor "
                "shapes steady (pad variable-length batches to a few sizes)",
                evidence={"samples": [list(s) for s in self.samples]},
            )
        )
