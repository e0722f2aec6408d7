"""The ``tensor-accumulation`` probe."""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

from trainwell.doctor.events import Reporter, StepEvent, UpdateEvent
from trainwell.doctor.findings import Finding
from trainwell.doctor.holders import Holder, grows, store_site
from trainwell.doctor.memory import climbing, cuda_memory
from trainwell.doctor.scan import ItemCounts, holders_at, scheduled, sleep_until_scheduled


def _on_device(item: Any) -> bool:
    # Only tensors kept on an accelerator count: detached CPU copies (predictions for an
    # epoch metric, caches) are a normal pattern.
    return isinstance(item, torch.Tensor) and item.grad_fn is None and item.device.type != "cpu"


class TensorAccumulationProbe:
    """``tensor-accumulation``: device memory that grows step over step through tensors
    without history.

    Named by who holds them where it can be: at the scanned steps (see
    :func:`~trainwell.doctor.scan.scheduled`) a container of the user's (a list, a dict,
    an attribute) holding one more device tensor at each of ``DEVICE_STEPS`` scans.
    Else from CUDA's own counters, sampled every ``EVERY`` steps: allocated memory
    climbing while no holder was named (the holder scan is the precise signal, and the
    one that works on any device).
    """

    DEVICE_STEPS = 8  # a slower leak than a graph's: wait longer
    EVERY = 10
    WINDOW = 12

    def __init__(self, sample: Any = cuda_memory) -> None:
        self.history: dict[str, deque[int]] = {}
        self.counts = ItemCounts(_on_device)
        self.sample = sample
        self.sampling = True  # CUDA is there to sample
        self.samples: deque[tuple[int, int]] = deque(maxlen=self.WINDOW)

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        if scheduled(event.step):
            self._scan(doc, event)
        if self.sampling and not event.step % self.EVERY and event.frame is not None:
            self._sample(doc, event)
        sample = (event.step // self.EVERY + 1) * self.EVERY if self.sampling else None
        sleep_until_scheduled(doc, self, event.step, also=sample)

    def on_update(self, doc: Reporter, event: UpdateEvent) -> None:
        # A hand-written update (no optimizer) counted as a step: scanned alike.
        if scheduled(event.step):
            self._scan(doc, event)

    def _scan(self, doc: Reporter, event: StepEvent | UpdateEvent) -> None:
        seen: set[str] = set()
        for path, holder in holders_at(doc, event):
            if isinstance(holder.value, torch.Tensor):
                continue
            count = self.counts.count(path, holder.value)
            if count is None:
                continue
            seen.add(path)
            if grows(self.history, path, count, self.DEVICE_STEPS):
                self._report_holder(doc, holder, count)
        for path in [p for p in self.history if p not in seen]:
            del self.history[path]
        self.counts.forget(seen)

    def _report_holder(self, doc: Reporter, holder: Holder, count: int) -> None:
        site = store_site(holder, container=True)
        if site is None:
            return
        file, line, created = site
        doc.add(
            Finding(
                code="tensor-accumulation",
                severity="warning",
                file=file,
                line=line,
                message=f"{holder.describe()} keeps a device tensor from every step ({count} so "
                "far): device memory grows step over step",
                why="tensors without history still hold device memory until the container "
                "is cleared",
                fix="move what you keep to the CPU (.detach().cpu()) or keep a running "
                "metric (a float) instead",
                related=[{"file": file, "line": created, "what": "created here"}]
                if created
                else [],
                evidence={"device_tensors": count, "steps_observed": doc.steps},
            )
        )

    def _sample(self, doc: Reporter, event: StepEvent) -> None:
        value = self.sample()
        if value is None:
            self.sampling = False  # no CUDA: nothing to sample, ever
            return
        self.samples.append(value)
        named = any(f.code in ("graph-retained", "tensor-accumulation") for f in doc.findings)
        if named or not climbing(list(self.samples)):
            return
        frame = event.frame
        if frame is None:
            return
        first, last = self.samples[0][0], self.samples[-1][0]
        doc.add(
            Finding(
                code="tensor-accumulation",
                severity="warning",
                file=frame.f_code.co_filename,
                line=frame.f_lineno,
                message=f"allocated device memory grows step over step ({first:,} -> "
                f"{last:,} bytes over {len(self.samples) * self.EVERY} steps); the "
                "doctor could not name what holds it",
                why="something keeps device tensors from every step: memory runs out",
                fix="look for tensors kept across steps (lists, dicts, attributes, "
                "caches); keep .item() floats or .detach().cpu() copies instead",
                evidence={"samples": [list(s) for s in self.samples]},
            )
        )
