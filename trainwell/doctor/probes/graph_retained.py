"""The ``graph-retained`` probe."""

from __future__ import annotations

import time
import weakref
from collections import deque
from typing import Any

import torch
from torch import nn

from trainwell.doctor.events import (
    ForwardEvent,
    Reporter,
    StepEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.graph import walk as _walk
from trainwell.doctor.holders import (
    _attributes,
    _bytes_held,
    _device_tensors,
    _grows,
    _Holder,
    _holders,
    _measure,
    _store_site,
)


class GraphRetainedProbe:
    """Tensors with autograd history that outlive their step, found by who holds them.

    At each optimizer step the user's variables (the training loop's locals, the
    script's globals, attributes of its objects and modules, closures of forward hooks)
    are measured: how many graph-carrying tensors a container holds, or how large the
    graph behind one tensor is. A holder whose measure grows at every one of several
    consecutive steps keeps every step's graph alive.
    """

    STEPS = 3  # consecutive growths before reporting
    DEVICE_STEPS = 8  # device tensors without graphs: a slower leak, wait longer
    GRAPH_LIMIT = 50_000  # nodes counted at most per tensor
    DENSE_STEPS = 9  # scan every step up to here (enough observations for every rule)
    BUDGET = 0.01  # then scan only while scans have taken under 1% of the time

    def __init__(self) -> None:
        self.history: dict[str, deque[int]] = {}
        self.device_history: dict[str, deque[int]] = {}
        # Models seen training: scanned even when no user frame is on the stack (the
        # engine's own loop runs a user's model given by import path).
        self.models: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self.model_ids: set[int] = set()
        self.started = 0.0
        self.scan_time = 0.0
        self.roots: dict[str, Any] = {}  # the graph root each single-tensor holder had

    def on_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        # Every training forward comes here: test membership by id, which is cheap,
        # before making the weak reference.
        if event.grad_enabled and id(event.module) not in self.model_ids:
            self.watch_model(event.module)

    def watch_model(self, model: nn.Module) -> None:
        self.model_ids.add(id(model))
        self.models.add(model)

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        # The scan is the doctor's one costly check (~0.1 ms): every step at first (most
        # leaks show within a few steps), then as often as 1% of the run's time allows,
        # which still sees steady growth between two scans.
        now = time.perf_counter()
        self.started = self.started or now
        if event.step > self.DENSE_STEPS and self.scan_time > self.BUDGET * (now - self.started):
            return
        try:
            self._scan(doc, event)
        finally:
            self.scan_time += time.perf_counter() - now

    def _scan(self, doc: Reporter, event: StepEvent) -> None:
        frame = event.frame
        seen: set[str] = set()
        for path, holder in self._holders(frame):
            size = _measure(holder.value, self.GRAPH_LIMIT)
            if size is None:
                continue
            seen.add(path)
            self._judge(doc, path, holder, size, frame)
        for history in (self.history, self.device_history, self.roots):
            for path in list(history):
                if path not in seen:
                    del history[path]

    def _holders(self, frame: Any) -> list[tuple[str, _Holder]]:
        """What may hold tensors across steps: the user's frames, and the models'
        attributes."""
        scanned: set[int] = set()  # objects whose attributes were looked at
        holders = _holders(frame, scanned) if frame is not None else []
        for model in list(self.models):
            model = getattr(model, "module", model)  # inside DDP
            if id(model) not in scanned:
                holders += _attributes(type(model).__name__, model, scanned)
        return holders

    def _judge(self, doc: Reporter, path: str, holder: _Holder, size: int, frame: Any) -> None:
        if isinstance(holder.value, torch.Tensor) and not self._reaches_back(path, holder):
            # A fresh graph this step (a loss, an output): its size may vary with the
            # batch, but it holds nothing from earlier steps.
            self.history.pop(path, None)
            return
        if _grows(self.history, path, size, self.STEPS):
            self._report(doc, path, holder, size, frame)
        if not isinstance(holder.value, torch.Tensor):
            # Without graphs: only tensors kept on an accelerator count. Detached CPU
            # copies (predictions for an epoch metric, caches) are a normal pattern.
            on_device = _device_tensors(holder.value)
            if _grows(self.device_history, path, on_device, self.DEVICE_STEPS):
                self._report_device(doc, holder, on_device, frame)

    def _reaches_back(self, path: str, holder: _Holder) -> bool:
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

    def _report_device(self, doc: Reporter, holder: _Holder, count: int, frame: Any) -> None:
        site = _store_site(holder, container=True)
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

    def _report(self, doc: Reporter, path: str, holder: _Holder, size: int, frame: Any) -> None:
        container = not isinstance(holder.value, torch.Tensor)
        site = _store_site(holder, container)
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
                "bytes_held": _bytes_held(holder.value),  # the tensors; their graphs add more
                "steps_observed": doc.steps,
            }
        elif holder.carried:
            message = (
                f"{holder.describe()} is carried from step to step without detach(): its "
                f"graph reaches back to the first step ({size} nodes)"
            )
            fix = f"detach the carried state each step: {holder.name} = {holder.name}.detach()"
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
