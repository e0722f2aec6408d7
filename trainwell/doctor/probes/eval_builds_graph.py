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

    A grad-enabled forward of a model (a module with parameters: loss modules are not
    models) hangs a sentinel on its output's graph node. A backward through that node
    clears it; a node freed (or still alive at the end) with its sentinel in place was
    built for nothing. This holds whatever the model's mode (a backbone kept in eval
    mode for its BatchNorm statistics but trained through is fine) and says so even when
    nothing is kept.
    """

    MAX_PENDING = 64  # unreached outputs followed at once; enough to see the pattern
    ALWAYS = 16  # training-mode forwards of each calling line all followed at first
    EVERY = 64  # then one in this many of a line whose forwards all reached a backward

    def __init__(self) -> None:
        # key -> [weak refs to its sentinels, (pin) site, what, calling line]; one per forward
        self.pending: dict[int, list[Any]] = {}
        self.forwards = 0
        self.calls: dict[Any, int] = {}  # training-mode forwards by calling line
        self.suspect: set[Any] = set()  # calling lines with a forward never reached
        self.unreached: dict[tuple[str, int], int] = {}  # forwards never reached, by line

    def on_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        if not event.grad_enabled:
            return
        # Training-mode forwards are followed, per calling line, all at first, then one
        # in EVERY while every one followed reached a backward (the training loop's
        # line): an evaluation without no_grad is another line, followed from its first
        # forward, and a line once caught is followed always. Eval-mode forwards (rare
        # in training) are always followed.
        key = event.key
        training = event.module.training
        if training:
            calls = self.calls[key] = self.calls.get(key, 0) + 1
            if calls > self.ALWAYS and calls % self.EVERY and key not in self.suspect:
                return
        if len(self.pending) < self.MAX_PENDING:
            self._follow(doc, event, key, training)

    def _follow(self, doc: Reporter, event: ForwardEvent, key: Any, training: bool) -> None:
        # Every output with a graph: a model may return several (an RNN's output and
        # state) and the loss may use only one of them.
        nodes = {id(t.grad_fn): t.grad_fn for t in _tensors(event.output) if t.grad_fn}
        if not nodes:  # (the frame sends forwards of models only: modules with weights)
            return
        self.forwards += 1
        index = self.forwards  # a counter: ids of freed objects are reused
        refs = []
        for node in nodes.values():
            sentinel = _Sentinel(self.pending, index)
            # The graph node holds the sentinel, the probe only a weak reference, whose
            # callback runs when the node (the graph) is freed.
            refs.append(weakref.ref(sentinel, lambda _, k=index: self._freed(doc, k)))
            node.register_prehook(sentinel)
        what = f"{type(event.module).__name__} in {'train' if training else 'eval'} mode"
        self.pending[index] = [refs, event.pin(), what, key]  # the site, looked up if needed

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
        _, pinned, what, key = entry
        self.suspect.add(key)
        site = pinned()
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
