"""The ``eval-builds-graph`` probe."""

from __future__ import annotations

import weakref
from typing import Any

from trainwell.doctor.events import (
    ForwardEvent,
    Reporter,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.graph import output_tensors as _tensors


class EvalBuildsGraphProbe:
    """Forward passes that build a graph no backward ever uses: evaluation without
    ``torch.no_grad()`` / ``torch.inference_mode()``.

    Each grad-enabled forward of a model (a module with parameters: loss modules are
    not models) hangs a sentinel on its output's graph node. A backward through that node
    clears it; a node freed (or still alive at the end) with its sentinel in place was
    built for nothing. This holds whatever the model's mode (a backbone kept in eval
    mode for its BatchNorm statistics but trained through is fine) and says so even when
    nothing is kept.
    """

    MAX_PENDING = 64  # unreached outputs followed at once; enough to see the pattern
    ALWAYS = 16  # training forwards all followed at first
    SAMPLE = 8  # then one in this many

    def __init__(self) -> None:
        # key -> [weak refs to its sentinels, site, what]; one entry per forward
        self.pending: dict[int, list[Any]] = {}
        self.forwards = 0
        self.unreached: dict[tuple[str, int], int] = {}  # forwards never reached, by line

    def on_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        if not event.grad_enabled or len(self.pending) >= self.MAX_PENDING:
            return
        self.forwards += 1
        # Training forwards are followed one in SAMPLE after the first few: a forward
        # that never reaches backward comes back batch after batch, so a sample sees it,
        # and the training step pays for a sentinel only now and then. Eval-mode forwards
        # (rare in training) are always followed.
        training = event.module.training
        if training and self.forwards > self.ALWAYS and self.forwards % self.SAMPLE:
            return
        # Every output with a graph: a model may return several (an RNN's output and
        # state) and the loss may use only one of them.
        nodes = {id(t.grad_fn): t.grad_fn for t in _tensors(event.output) if t.grad_fn}
        if not nodes:  # (the frame sends forwards of models only: modules with weights)
            return
        key = self.forwards  # a counter: ids of freed objects are reused
        mode = "train" if training else "eval"
        refs = []
        for node in nodes.values():
            sentinel = _Sentinel(self.pending, key)
            # The graph node holds the sentinel, the probe only a weak reference, whose
            # callback runs when the node (the graph) is freed.
            refs.append(weakref.ref(sentinel, lambda _, k=key: self._freed(doc, k)))
            node.register_prehook(sentinel)
        self.pending[key] = [refs, event.site, f"{type(event.module).__name__} in {mode} mode"]

    def on_end(self, doc: Reporter) -> None:
        if doc.crashed:
            return  # the crash stopped the last forward before its backward
        for key in list(self.pending):
            self._report(doc, self.pending.pop(key))  # alive, never reached: kept for nothing

    def _freed(self, doc: Reporter, key: int) -> None:
        entry = self.pending.get(key)
        if entry is None or doc.crashed:
            return  # a backward went through one of its outputs, or a crash stopped it
        if any(ref() is not None for ref in entry[0]):
            return  # another output's graph still lives and may yet be reached
        self._report(doc, self.pending.pop(key))

    def _report(self, doc: Reporter, entry: list[Any]) -> None:
        _, site, what = entry
        if site is None:
            return
        # A one-off forward (a demo print after training) is not the pitfall; an
        # evaluation without no_grad comes back at the same line.
        key = (site.file, site.line)
        self.unreached[key] = self.unreached.get(key, 0) + 1
        if self.unreached[key] < 2:
            return
        doc.add(
            Finding(
                code="eval-builds-graph",
                severity="warning",
                file=site.file,
                line=site.line,
                message=f"forward pass with grad enabled ({what}) whose output never reached "
                "a backward: an autograd graph built for nothing",
                why="every such call records a graph and keeps its activations while the "
                "output lives: slower, and memory for nothing",
                fix="run evaluation under `with torch.no_grad():` (or torch.inference_mode())",
                evidence={"module": what.split(" ")[0]},
            )
        )


class _Sentinel:
    """Hung on a graph node: a backward through the node clears its pending entry."""

    __slots__ = ("pending", "key", "__weakref__")

    def __init__(self, pending: dict[int, Any], key: int) -> None:
        self.pending = pending
        self.key = key

    def __call__(self, grad_outputs: Any) -> None:
        self.pending.pop(self.key, None)
