"""The ``graph-retained`` probe."""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

from trainwell.doctor.carried import detach_statement, state_kind
from trainwell.doctor.events import Reporter, StepEvent, UpdateEvent
from trainwell.doctor.findings import Finding
from trainwell.doctor.graph import walk as _walk
from trainwell.doctor.holders import (
    Holder,
    bytes_held,
    graph_size,
    grows,
    nested_graph,
    store_site,
)
from trainwell.doctor.scan import ItemCounts, holders_at, scheduled, sleep_until_scheduled


def _holds_graph(item: Any) -> bool:
    # An item counts when it holds a graph, itself or in a small tuple or dict
    # (``outputs.append({"loss": loss, "logits": logits})``).
    if isinstance(item, torch.Tensor):
        return item.grad_fn is not None
    return nested_graph(item)


class GraphRetainedProbe:
    """Tensors with autograd history that outlive their step, found by who holds them.

    At scanned optimizer steps (every one at first, then sparser: see
    :func:`~trainwell.doctor.scan.scheduled`) the user's variables (the training loop's
    locals, the script's globals, attributes of its objects and modules, closures of
    forward hooks) are measured: how many graph-carrying tensors a container holds, or
    how large the graph behind one tensor is. A holder whose measure grows at every one
    of several consecutive scans keeps every step's graph alive.
    """

    STEPS = 3  # consecutive growths before reporting
    GRAPH_LIMIT = 50_000  # nodes counted at most per tensor

    def __init__(self) -> None:
        self.history: dict[str, deque[int]] = {}
        self.counts = ItemCounts(_holds_graph)
        self.roots: dict[str, Any] = {}  # the graph root each single-tensor holder had

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        sleep_until_scheduled(doc, self, event.step)
        if scheduled(event.step):
            self._scan(doc, event)

    def on_update(self, doc: Reporter, event: UpdateEvent) -> None:
        # A hand-written update (no optimizer) counted as a step: scanned alike.
        if scheduled(event.step):
            self._scan(doc, event)

    def _scan(self, doc: Reporter, event: StepEvent | UpdateEvent) -> None:
        frame = event.frame
        seen: set[str] = set()
        for path, holder in holders_at(doc, event):
            value = holder.value
            if isinstance(value, torch.Tensor):
                size = graph_size(value.grad_fn, self.GRAPH_LIMIT) if value.grad_fn else None
            else:
                size = self.counts.count(path, value)
            if size is None:
                continue
            seen.add(path)
            self._judge(doc, path, holder, size, frame)
        for history in (self.history, self.roots):
            for path in [p for p in history if p not in seen]:
                del history[path]
        self.counts.forget(seen)

    def _judge(self, doc: Reporter, path: str, holder: Holder, size: int, frame: Any) -> None:
        if isinstance(holder.value, torch.Tensor) and not self._reaches_back(path, holder):
            # A fresh graph this step (a loss, an output): its size may vary with the
            # batch, but it holds nothing from earlier steps.
            self.history.pop(path, None)
            return
        if not isinstance(holder.value, torch.Tensor) and self.counts.renewed(path, holder.value):
            # Emptied since the last scan (an episode's log-probs, cleared at its end):
            # what it holds now is no older than that, however long it is.
            self.history.pop(path, None)
        if grows(self.history, path, size, self.STEPS):
            self._report(doc, path, holder, size, frame)

    def _reaches_back(self, path: str, holder: Holder) -> bool:
        """Does this tensor's graph contain the graph the same holder had at the last
        scan? That is what keeping history across steps means (``total += loss``, a
        state carried without detach); a new graph of the same size does not."""
        root = holder.value.grad_fn
        previous = self.roots.get(path)
        self.roots[path] = root  # the node only: its saved tensors were freed by backward
        if previous is None:
            return True  # nothing to compare yet
        if previous is root:
            return True  # the same graph is still held
        return any(node is previous for node in _walk(root, self.GRAPH_LIMIT))

    def _report(self, doc: Reporter, path: str, holder: Holder, size: int, frame: Any) -> None:
        container = not isinstance(holder.value, torch.Tensor)
        site = store_site(holder, container)
        if site is None and frame is None:
            return  # nowhere in the user's code to point at: say nothing rather than guess
        site = site or (frame.f_code.co_filename, frame.f_lineno, None)
        file, line, created = site
        kind = "list" if isinstance(holder.value, list) else type(holder.value).__name__
        if container:
            message = (
                f"{holder.describe()} keeps a tensor with its autograd graph from every step "
                f"({size} so far, in a {kind})"
            )
            fix = "store loss.item() (a float) or tensor.detach() instead of the tensor"
            evidence = {
                "tensors_with_graph": size,
                "bytes_held": bytes_held(holder.value),  # the tensors; their graphs add more
                "steps_observed": doc.steps,
            }
        elif holder.carried:
            message = (
                f"{holder.describe()} is carried from step to step without detach(): its "
                f"graph reaches back to the first step ({size} nodes)"
            )
            # An LSTM's (h, c) has no .detach(): the fix follows the state's structure.
            statement = detach_statement(holder.name, state_kind(holder.value))
            fix = f"detach the carried state each step: {statement}"
            evidence = {"graph_nodes": size, "steps_observed": doc.steps}
        else:
            message = (
                f"{holder.describe()} accumulates tensors with their autograd graphs: its "
                f"graph grows every step ({size} nodes)"
            )
            fix = "accumulate loss.item() (a float) or loss.detach() instead"
            evidence = {"graph_nodes": size, "steps_observed": doc.steps}
        related = [{"file": file, "line": created, "what": "the tensor is created here"}]
        doc.add(
            Finding(
                code="graph-retained",
                severity="error",
                file=file,
                line=line,
                message=message,
                why="each step's activations stay in memory: memory grows until out of memory",
                fix=fix,
                related=related if created else [],
                evidence=evidence,
            )
        )
