"""The dispatcher: torch calls turned into training events, sent to the probes.

A user's own script is watched with no code change: a wrapper around
``nn.Module.__call__`` (the outermost call is a model's forward), global optimizer step
hooks and wrappers around ``Tensor.backward``, ``Optimizer.zero_grad``,
``LRScheduler.step`` and DataLoader iteration turn its training into events; wrappers
around the losses, ``GradScaler.step`` / ``update``, ``Module.train``, the optimizer,
scheduler and DataLoader constructors add the rest. Probes subscribe by having the
``on_*`` methods of :data:`~trainwell.doctor.events.EVENTS` (a method named after no
event is refused); the trackers several probes follow are built once per run and handed
to them (:mod:`~trainwell.doctor.trackers`); a probe that has seen enough
unsubscribes and costs nothing after: an event no probe listens to is not even made, and
a wrapper that only serves such events is taken off torch until a probe subscribes
again. Everything installed is removed on exit.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from trainwell.doctor.events import (
    EVENTS,
    BackwardEvent,
    BatchEvent,
    ForwardEvent,
    Handler,
    LossWatch,
    Probe,
    StepEvent,
    StopTraining,
    UpdateEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.handlers import probe_handlers
from trainwell.doctor.patches import (
    Patch,
    install_warning_relay,
    remove_warning_relay,
    replacements,
)
from trainwell.doctor.records import ForwardRecord
from trainwell.doctor.sites import Site, variable_name
from trainwell.doctor.trackers import Trackers


class Dispatcher:
    """Turns torch calls into events (through patches and global hooks) and sends them
    to the probes that subscribe; collects their findings, once per (code, file, line).

    Example:
        >>> with Dispatcher(probes=[]) as doc:
        ...     pass
        >>> doc.findings
        []
    """

    def __init__(
        self,
        probes: list[Probe],
        max_steps: int | None = None,
        on_finding: Callable[[Finding], None] | None = None,
    ) -> None:
        self.probes = probes
        # Each probe's handlers, looked up once (a misspelt one refused); (id(probe),
        # event) pairs switched off.
        self._methods = [(p, probe_handlers(p)) for p in probes]
        self._owner = {id(m): p for p, ms in self._methods for m in ms.values()}
        self._off: set[tuple[int, str]] = set()
        self._disabled: set[int] = set()
        self._alarms: dict[int, list[tuple[Probe, tuple[str, ...]]]] = {}  # step -> wake-ups
        self._handlers: dict[str, tuple[Handler, ...]] = {}
        self._nograd: tuple[Handler, ...] = ()  # on_forward's and on_nograd_forward's
        # What several probes follow, one of each per run, handed to those that attach.
        self.trackers = Trackers()
        for probe in probes:
            attach = getattr(probe, "attach", None)
            if callable(attach):
                attach(self.trackers)
        self._patches: list[Patch] = []
        self._serving: dict[str, list[Patch]] = {}  # event -> the wrappers serving it
        self._rebuild()
        self.max_steps = max_steps
        self.on_finding = on_finding  # called with each new finding (the engine prints it)
        self.findings: list[Finding] = []
        self.errors: list[str] = []  # probes that failed (and were switched off)
        self.steps = 0
        self.crashed = False  # the watched code raised: its last step never finished
        self._keys: set[tuple[str, str, int]] = set()
        self._depth = 0  # nesting of module calls: 0 outside any model
        self._mode_depth = 0  # nesting of Module.train calls
        # id(module) -> (weak ref, whether it has parameters): forwards of modules without
        # are not events. Keyed by id, for speed; an entry leaves with its module.
        self._known: dict[int, tuple[Any, bool]] = {}
        self._given: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # by watch_model
        # model -> the name the user's code called it by (``net``, ``self.model``)
        self._model_names: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        self._creating = 0  # inside a scheduler's constructor
        self._muted = False  # a probe is replaying a forward: no events meanwhile
        self._ended = False  # end() speaks once: the engine calls it before doctor.json
        # (iterator, batch) -> the batch the script gets: the overfit check's hook
        self.swap_batch: Any = None
        self._handles: list[Any] = []
        self._pre_hook: Any = None
        self._warning_hook: Any = None
        # For the explanations: the last training forward and this step's, the last batch,
        # the last loss backwarded (weakly), and the autograd sequence number of the last
        # loss backwarded before the last optimizer step (older nodes are an earlier step's).
        self.last_forward: ForwardRecord | None = None
        self.step_forwards: list[ForwardRecord] = []  # this step's first 4 and last 4
        self.last_batch: BatchEvent | None = None
        self._losses = LossWatch()  # for on_nonfinite_loss: one check per backward for all
        self.recent_losses = self._losses.recent
        self.last_backward: weakref.ref[torch.Tensor] | None = None
        self.backwards = 0  # backward calls so far (a BackwardEvent's index)
        self._backward_seq = -1
        self._prev_backward_seq = -1
        self.seq_before_step = -1
        self.stopped = False  # stopped at max_steps
        # id(dataset) -> where the user built its DataLoader
        self.loader_sites: dict[int, Site | None] = {}

    # ---- reporting ------------------------------------------------------------------------

    def add(self, finding: Finding) -> None:
        """Keep ``finding`` unless the same (code, file, line) was reported already."""
        if finding.key not in self._keys:
            self._keys.add(finding.key)
            self.findings.append(finding)
            if self.on_finding is not None:
                self.on_finding(finding)

    # ---- installing the hooks ---------------------------------------------------------------

    def __enter__(self) -> Dispatcher:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()
        self.end()

    def install(self) -> None:
        from torch.optim import optimizer as optimizer_mod

        if self._handlers["on_pre_step"]:
            self._pre_hook = optimizer_mod.register_optimizer_step_pre_hook(self._pre_step)
        self._handles = [optimizer_mod.register_optimizer_step_post_hook(self._post_step)]
        self._patches = [Patch(*r) for r in replacements(self)]
        self._serving = {e: [p for p in self._patches if e in p.events] for e in EVENTS}
        self._sync_patches()
        self._warning_hook = install_warning_relay()

    def uninstall(self) -> None:
        if self._pre_hook is not None:
            self._pre_hook.remove()
            self._pre_hook = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for patch in reversed(self._patches):
            patch.put(False, force=True)
        self._patches = []
        if self._warning_hook is not None:
            remove_warning_relay(self._warning_hook)
            self._warning_hook = None

    def _sync_patches(self, names: tuple[str, ...] = EVENTS) -> None:
        """Each wrapper on torch while a probe listens to what it serves (of those
        serving ``names``; at install, all)."""
        if names is EVENTS:
            for patch in self._patches:
                patch.put(not patch.events or any(self._handlers[e] for e in patch.events))
            return
        for name in names:
            for patch in self._serving.get(name, ()):
                patch.put(any(self._handlers[e] for e in patch.events))

    # ---- subscriptions ------------------------------------------------------------------------

    def _dispatch(self, method: str, event: object) -> None:
        if self._muted:
            return
        for handler in self._handlers[method]:
            try:
                handler(self, event)
            except Exception as exc:  # a doctor's bug must never break the user's training
                self._disable(handler, exc)

    def _rebuild(self, names: tuple[str, ...] = EVENTS) -> None:
        """The handler tuples of ``names`` (and the wrappers they need), anew."""
        off, disabled = self._off, self._disabled

        def on(p: Probe, name: str) -> bool:
            return id(p) not in disabled and (id(p), name) not in off

        for name in names:
            self._handlers[name] = tuple(ms[name] for p, ms in self._methods
                                         if name in ms and on(p, name))  # fmt: skip
        both = ("on_forward", "on_nograd_forward")
        if both[0] in names or both[1] in names:
            self._nograd = tuple(ms[n] for p, ms in self._methods for n in both
                                 if n in ms and on(p, n))  # fmt: skip
        if self._patches:
            self._sync_patches(names)

    def unsubscribe(self, probe: Probe, *events: str, until: int | None = None) -> None:
        """Stop sending ``events`` to ``probe``: it has seen what it needed, and a probe
        that judges the first steps then costs the training nothing. With ``until``,
        send them again from that optimizer step on (a probe that looks now and then
        sleeps in between)."""
        self._off.update((id(probe), e) for e in events)
        if until is not None:
            self._alarms.setdefault(max(until, self.steps + 1), []).append((probe, events))
        elif self._alarms:  # for good: no wake-up either
            for step, wakes in list(self._alarms.items()):
                self._alarms[step] = [(p, es) for p, es in wakes
                                      if p is not probe or not set(es) <= set(events)]  # fmt: skip
        self._rebuild(events)

    def _wake(self) -> None:
        for probe, events in self._alarms.pop(self.steps, ()):
            self.subscribe(probe, *events)

    def subscribe(self, probe: Probe, *events: str) -> None:
        """Send ``events`` to ``probe`` again (after :meth:`unsubscribe`): something it
        judges happened anew (a mode switch, a new optimizer)."""
        self._off.difference_update((id(probe), e) for e in events)
        self._rebuild(events)
        if self._handles and self._pre_hook is None and self._handlers["on_pre_step"]:
            from torch.optim import optimizer as optimizer_mod

            self._pre_hook = optimizer_mod.register_optimizer_step_pre_hook(self._pre_step)

    def _disable(self, handler: Callable[..., None], exc: Exception) -> None:
        probe = self._owner.get(id(handler), getattr(handler, "__self__", handler))
        self.errors.append(f"{type(probe).__name__}: {type(exc).__name__}: {exc}")
        self._disabled.add(id(probe))
        self._rebuild()

    def watch_model(self, model: nn.Module) -> None:
        """Tell the probes about a model before it runs (they find models by themselves)."""
        self._given.add(model)
        for probe in self.probes:
            if hasattr(probe, "watch_model"):
                probe.watch_model(model)

    def model_name(self, model: nn.Module) -> str:
        """The name the user's code holds ``model`` by, where its first forward ran
        (``model`` when it could not be told)."""
        return self._model_names.get(getattr(model, "module", model), "model")

    def seen_modules(self) -> list[nn.Module]:
        """The modules called outside any other (models and losses) still alive."""
        return [m for m in (ref() for ref, _ in list(self._known.values())) if m is not None]

    def models(self) -> list[nn.Module]:
        """The models still alive: modules with weights called outside any other, and
        those given to :meth:`watch_model`."""
        live = (ref() for ref, model in list(self._known.values()) if model)
        found = [m for m in live if m is not None]
        return found + [m for m in list(self._given) if id(m) not in self._known]

    @contextlib.contextmanager
    def muted(self) -> Iterator[None]:
        """No events inside: a probe runs the model itself (replaying a batch)."""
        muted, depth = self._muted, self._depth
        self._muted, self._depth = True, depth + 1
        try:
            yield
        finally:
            self._muted, self._depth = muted, depth

    def end(self) -> None:
        """The run is over: probes that judge the whole run speak now (once)."""
        if self._ended:
            return
        self._ended = True
        for probe in self.probes:
            if hasattr(probe, "on_end"):
                try:
                    probe.on_end(self)
                except Exception as exc:
                    self._disable(probe.on_end, exc)

    # ---- events -------------------------------------------------------------------------------

    def _learn(self, module: nn.Module) -> tuple[Any, bool]:
        """The first call of a module outside any other: is it a model (weights), and
        what does the user's code call it."""
        key, known = id(module), any(True for _ in module.parameters())
        entry = self._known[key] = (weakref.ref(module, lambda _: self._known.pop(key, None)),
                                    known)  # fmt: skip
        name = variable_name(module, sys._getframe(3)) if known else None
        if name is not None:
            self._model_names[module] = name
        return entry

    def _on_forward(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        entry = self._known.get(id(module)) or self._learn(module)
        if not entry[1]:
            return  # a loss module: no weights, nothing for the probes to watch
        frame = sys._getframe(2)
        grad = torch.is_grad_enabled()
        if grad:
            record = self.last_forward = ForwardRecord(self.steps, module, args, kwargs, frame)
            forwards = self.step_forwards
            if not forwards or forwards[0].steps != self.steps:
                self.step_forwards = [record]  # this step's first
            else:
                if len(forwards) >= 8:
                    del forwards[4]  # the first ones (a carried state), the last (a NaN)
                forwards.append(record)
            handlers = self._handlers["on_forward"]
        else:
            handlers = self._nograd
        if handlers:
            event = ForwardEvent(module, args, kwargs, output, grad, frame)
            for handler in handlers:  # _dispatch's loop, inline: it runs at every forward
                try:
                    handler(self, event)
                except Exception as exc:
                    self._disable(handler, exc)

    def _on_backward(self, tensor: torch.Tensor, retain_graph: bool) -> None:
        fn = tensor.grad_fn
        self._prev_backward_seq = self._backward_seq
        if fn is not None:
            self._backward_seq = fn._sequence_nr()
        self.last_backward = weakref.ref(tensor)
        self.backwards += 1
        handlers, nonfinite = self._handlers["on_backward"], self._handlers["on_nonfinite_loss"]
        if (handlers or nonfinite) and not self._muted:
            event = BackwardEvent(tensor, retain_graph, sys._getframe(2), self.backwards)
            for handler in handlers:  # _dispatch's loop, inline: it runs at every backward
                try:
                    handler(self, event)
                except Exception as exc:
                    self._disable(handler, exc)
            if nonfinite and self._losses.nonfinite(event):
                self._dispatch("on_nonfinite_loss", event)

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._handlers["on_pre_step"]:
            event = StepEvent(optimizer, self.steps + 1, sys._getframe(1), _closure(args, kwargs))
            self._dispatch("on_pre_step", event)

    def count_step(self) -> None:
        """One more optimizer step (or a manual update of the weights); stops the
        script at ``max_steps``."""
        self.steps += 1
        if self.steps in self._alarms:
            self._wake()
        # Called at the backward after the update: the mark is the backward before it,
        # and this step's forwards ran before it was counted.
        self.seq_before_step = self._prev_backward_seq
        for record in self.step_forwards:
            record.steps = self.steps
        if self._handlers["on_update"]:
            self._dispatch("on_update", UpdateEvent(self.steps, sys._getframe(1)))
        if self.max_steps is not None and self.steps >= self.max_steps:
            self.stopped = True
            raise StopTraining(f"stopped after {self.steps} optimizer steps")

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1
        if self.steps in self._alarms:
            self._wake()  # probes asleep until this step hear it
        self.seq_before_step = self._backward_seq
        if self._pre_hook is not None and not self._handlers["on_pre_step"]:
            # No probe asks any more: torch need not call it. Removed here, not from
            # inside the pre-hook loop, whose dict must not change while it runs.
            self._pre_hook.remove()
            self._pre_hook = None
        handlers = self._handlers["on_step"]
        if handlers and not self._muted:
            event = StepEvent(optimizer, self.steps, sys._getframe(1), _closure(args, kwargs))
            for handler in handlers:  # _dispatch's loop, inline: it runs at every step
                try:
                    handler(self, event)
                except Exception as exc:
                    self._disable(handler, exc)
            del event  # holds the user's frame: let it go before the script continues
        if self.max_steps is not None and self.steps >= self.max_steps:
            self.stopped = True
            raise StopTraining(f"stopped after {self.steps} optimizer steps")


def _closure(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``optimizer.step`` got a closure: a step hook's ``args`` hold the
    optimizer itself first, then step's own arguments."""
    return (len(args) > 1 and args[1] is not None) or kwargs.get("closure") is not None
