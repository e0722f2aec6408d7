"""The ``eval-builds-graph`` probe."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from trainwell.doctor.events import (
    ForwardEvent,
    Reporter,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.graph import output_tensors as _tensors
from trainwell.doctor.sites import is_user_file


class EvalBuildsGraphProbe:
    """Forward passes that build a graph no backward ever uses: evaluation without
    ``torch.no_grad()`` / ``torch.inference_mode()``.

    A grad-enabled forward of a model (a module with parameters: loss modules are not
    models) hangs a sentinel on its output's graph node. A backward through that node
    clears it; a node freed (or still alive at the end) with its sentinel in place was
    built for nothing. This holds whatever the model's mode (a backbone kept in eval
    mode for its BatchNorm statistics but trained through is fine) and says so even when
    nothing is kept.

    A warning needs the calling line to come back: forwards never reached at two or
    more step counts (a validation every epoch), or called for from two or more lines
    (``predict(train_x)`` then ``predict(test_x)``). A forward loop run once (a
    ``model.generate(...)`` after training, one sample in the middle) costs its graph
    once, and sampling (each forward's tokens those of the last plus one: a
    generation loop, which keeps nothing) is not an evaluation: both are reported at the
    end as ``info``.
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
        # (file, line) -> [forwards never reached, the step counts they ran at, what,
        # the last one's token count, forwards with one token more than the last, the
        # lines that called the function holding the forward]
        self.unreached: dict[tuple[str, int], list[Any]] = {}

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

        def freed(_: object) -> None:
            self._freed(doc, index)

        for node in nodes.values():
            sentinel = _Sentinel(self.pending, index)
            # The graph node holds the sentinel, the probe only a weak reference, whose
            # callback runs when the node (the graph) is freed.
            refs.append(weakref.ref(sentinel, freed))
            node.register_prehook(sentinel)
        what = f"{type(event.module).__name__} in {'train' if training else 'eval'} mode"
        # The site, looked up if needed; the step count: is this line coming back?
        self.pending[index] = [refs, event.pin(), what, key, doc.steps, _tokens(event.args),
                               _outer(event)]  # fmt: skip

    def on_end(self, doc: Reporter) -> None:
        if doc.crashed:
            return  # the crash stopped the last forward before its backward
        for key in list(self.pending):
            self._report(doc, self.pending.pop(key))  # alive, never reached: kept for nothing
        for (file, line), (count, steps, what, _, grown, outer) in self.unreached.items():
            if count >= 2 and not _recurs(steps, outer, count, grown):  # worth a note
                doc.add(_finding("info", file, line, what, once=True))

    def _freed(self, doc: Reporter, key: int) -> None:
        entry = self.pending.get(key)
        if entry is None or doc.crashed:
            return  # a backward went through one of its outputs, or a crash stopped it
        if any(ref() is not None for ref in entry[0]):
            return  # another output's graph still lives and may yet be reached
        self._report(doc, self.pending.pop(key))

    def _report(self, doc: Reporter, entry: list[Any]) -> None:
        _, pinned, what, key, steps, tokens, outer = entry
        self.suspect.add(key)
        site = pinned()
        if site is None:
            return
        # A one-off forward (a demo print, a generation after training) is not the
        # pitfall; an evaluation without no_grad comes back at the same line, between
        # training steps.
        seen = self.unreached.setdefault((site.file, site.line),
                                         [0, set(), what, None, 0, set()])  # fmt: skip
        seen[0] += 1
        if len(seen[1]) < 2:
            seen[1].add(steps)
        if len(seen[5]) < 2:
            seen[5].add(outer)
        if tokens is not None and seen[3] is not None and tokens == seen[3] + 1:
            seen[4] += 1
        seen[3] = tokens
        if seen[0] >= 2 and _recurs(seen[1], seen[5], seen[0], seen[4]):
            doc.add(_finding("warning", site.file, site.line, what))


def _tokens(args: tuple) -> int | None:
    """The length of a forward's token ids (an integer tensor first), else ``None``."""
    x = args[0] if args else None
    if isinstance(x, torch.Tensor) and x.dim() >= 1 and not x.is_floating_point():
        return x.shape[-1]
    return None


def _outer(event: ForwardEvent) -> tuple[int, int] | None:
    """The line that called the function whose code ran the forward (``net.predict(x)``
    for a forward inside ``predict``), when it is the user's."""
    frame = event._frame
    back = frame.f_back if frame is not None else None
    if back is None or not is_user_file(back.f_code.co_filename):
        return None
    return id(back.f_code), back.f_lineno


def _recurs(steps: set, outer: set, count: int, grown: int) -> bool:
    """An evaluation: the line came back between training steps or from two call
    sites, and it is no sampling loop (most forwards fed one token more than the one
    before)."""
    sampling = grown >= 2 and 2 * grown >= count
    return not sampling and (len(steps) >= 2 or len(outer) >= 2)


def _finding(severity: str, file: str, line: int, what: str, once: bool = False) -> Finding:
    return Finding(
        code="eval-builds-graph",
        severity=severity,
        file=file,
        line=line,
        message=f"forward pass with grad enabled ({what}) whose output never reached "
        "a backward: an autograd graph built for nothing"
        + (" (a forward loop run once, after or between training steps)" if once else ""),
        why="every such call records a graph and keeps its activations while the "
        "output lives: slower, and memory for nothing",
        fix="run evaluation under `with torch.no_grad():` (or torch.inference_mode())"
        + (", generation too (decorate generate with @torch.no_grad())" if once else ""),
        evidence={"module": what.split(" ")[0]},
    )


class _Sentinel:
    """Hung on a graph node: a backward through the node clears its pending entry."""

    __slots__ = ("pending", "key", "__weakref__")

    def __init__(self, pending: dict[int, Any], key: int) -> None:
        self.pending = pending
        self.key = key

    def __call__(self, grad_outputs: Any) -> None:
        self.pending.pop(self.key, None)
