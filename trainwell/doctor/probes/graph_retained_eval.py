"""``graph-retained`` for what an evaluation keeps: the seed's "double leak".

Validation without ``no_grad`` *and* ``val_losses.append(val_loss)``: every validation
loss keeps its graph (and the batch's activations) for the rest of the run. The list
grows once per evaluation, between optimizer steps, so the step scans of
:class:`~trainwell.doctor.probes.graph_retained.GraphRetainedProbe` see it flat most of
the time. This probe measures the user's containers where an evaluation ends: when a
DataLoader is exhausted and when a model goes back to training mode
(``model.train()`` after ``model.eval()``). A container whose count of graph-carrying
items rose at two such points, optimizer steps between them, and never fell, keeps
graphs across steps (``eval-builds-graph`` reports the missing ``no_grad`` beside it).
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from trainwell.doctor.events import EpochEndEvent, ModeEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.holders import bytes_held, holders, nested_graph, store_site
from trainwell.doctor.scan import ItemCounts
from trainwell.doctor.sites import user_frame


def _holds_graph(item: Any) -> bool:
    if isinstance(item, torch.Tensor):
        return item.grad_fn is not None
    return nested_graph(item)


class GraphRetainedEvalProbe:
    """Containers that keep a graph-carrying tensor from every evaluation."""

    RISES = 2  # rises (each after optimizer steps) before reporting
    MAX_SCANS = 64  # a script that switches modes every step is the step scans' case

    def __init__(self) -> None:
        self.counts = ItemCounts(_holds_graph)
        self.history: dict[str, list[int]] = {}  # path -> counts at the scans so far
        self.scanned_at = -1  # optimizer step of the last scan
        self.scans = 0
        self.training: dict[int, bool] = {}  # id(model) -> its last mode

    def on_epoch_end(self, doc: Reporter, event: EpochEndEvent) -> None:
        self._scan(doc)

    def on_mode(self, doc: Reporter, event: ModeEvent) -> None:
        key = id(event.module)
        was = self.training.get(key)
        self.training[key] = event.mode
        if event.mode and was is False:  # back to training after an evaluation
            self._scan(doc)

    def _scan(self, doc: Reporter) -> None:
        if doc.steps <= self.scanned_at:
            return  # no optimizer step since: nothing has outlived a step yet
        self.scanned_at = doc.steps
        self.scans += 1
        if self.scans > self.MAX_SCANS:
            doc.unsubscribe(self, "on_epoch_end", "on_mode")
            return
        frame = user_frame(start=sys._getframe(1))
        if frame is None:
            return
        seen = set()
        for path, holder in holders(frame, set()):
            if isinstance(holder.value, torch.Tensor):
                continue  # one tensor's growing graph is the step scans' to judge
            count = self.counts.count(path, holder.value)
            if count is None:
                continue
            seen.add(path)
            counts = self.history.setdefault(path, [])
            counts.append(count)
            if self._leaks(counts):
                self._report(doc, holder, count)
        for path in [p for p in self.history if p not in seen]:
            del self.history[path]
        self.counts.forget(seen)

    def _leaks(self, counts: list[int]) -> bool:
        if len(counts) > 1 and counts[-1] < counts[-2]:
            del counts[:-1]  # emptied (a list cleared every epoch): start over from here
            return False
        return sum(b > a for a, b in zip(counts, counts[1:])) >= self.RISES

    def _report(self, doc: Reporter, holder: Any, count: int) -> None:
        site = store_site(holder, True)
        if site is None:
            return  # nowhere in the user's code to point at: say nothing rather than guess
        file, line, created = site
        kind = "list" if isinstance(holder.value, list) else type(holder.value).__name__
        related = [{"file": file, "line": created, "what": "the tensor is created here"}]
        doc.add(
            Finding(
                code="graph-retained",
                severity="error",
                file=file,
                line=line,
                message=f"{holder.describe()} keeps a tensor with its autograd graph from "
                f"every evaluation ({count} so far, in a {kind}): each keeps its batch's "
                "activations for the rest of the run",
                why="memory grows with every evaluation until out of memory; of the two "
                "leaks of an evaluation without no_grad, this one grows fastest",
                fix="store loss.item() (a float) or tensor.detach() instead of the tensor, "
                "and evaluate under torch.no_grad()",
                related=related if created else [],
                evidence={
                    "tensors_with_graph": count,
                    "bytes_held": bytes_held(holder.value),
                    "steps_observed": doc.steps,
                },  # fmt: skip
            )
        )
        self.history.clear()
