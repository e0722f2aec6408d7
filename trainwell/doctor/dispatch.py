"""The dispatcher: torch calls turned into training events, sent to the probes.

A user's own script is watched with no code change: a wrapper around
``nn.Module.__call__`` (the outermost call is a model's forward), global optimizer step
hooks and wrappers around ``Tensor.backward``, ``Optimizer.zero_grad``,
``LRScheduler.step`` and DataLoader iteration turn its training into events; wrappers
around the losses, ``GradScaler.step`` / ``update``, ``Module.train``, the optimizer,
scheduler and DataLoader constructors add the rest. Probes subscribe by having the
``on_*`` methods of :data:`~trainwell.doctor.events.EVENTS`; a probe that has seen enough
unsubscribes and costs nothing after. Everything installed is removed on exit.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from trainwell.doctor.events import EVENTS, BackwardEvent, ForwardEvent, StepEvent, StopTraining
from trainwell.doctor.findings import Finding
from trainwell.doctor.patches import install_warning_relay, remove_warning_relay, replacements
from trainwell.doctor.sites import variable_name


def _is_model(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


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
        probes: list[Any],
        max_steps: int | None = None,
        on_finding: Any = None,
    ) -> None:
        self.probes = probes
        # Each event's handlers, looked up once (the hooks run every step).
        self._handlers = {
            name: tuple(getattr(p, name) for p in probes if hasattr(p, name)) for name in EVENTS
        }
        self.max_steps = max_steps
        self.on_finding = on_finding  # called with each new finding (the engine prints it)
        self.findings: list[Finding] = []
        self.errors: list[str] = []  # probes that failed (and were switched off)
        self.steps = 0
        self.crashed = False  # the watched code raised: its last step never finished
        self._keys: set[tuple[str, str, int]] = set()
        self._depth = 0  # nesting of module calls: 0 outside any model
        self._mode_depth = 0  # nesting of Module.train calls
        # module -> whether it has parameters: forwards of the others are not events
        self._models: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()
        # model -> the name the user's code called it by (``net``, ``self.model``)
        self._model_names: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        self._creating = 0  # inside a scheduler's constructor
        self._muted = False  # a probe is replaying a forward: no events meanwhile
        # (iterator, batch) -> the batch the script gets: the overfit check's hook
        self.swap_batch: Any = None
        self._handles: list[Any] = []
        self._pre_hook: Any = None
        self._patches: list[tuple[Any, str, Any]] = []
        self._warning_hook: Any = None
        # For the crash explainer: the last training forward (weakly), the last loss
        # backwarded, and the autograd sequence number of the last loss backwarded
        # before the last optimizer step (nodes at or below it are an earlier step's).
        self.last_forward: ForwardRecord | None = None
        self.step_forwards: list[ForwardRecord] = []  # this step's first training forwards
        self.last_backward: Any = None
        self._backward_seq = -1
        self._prev_backward_seq = -1
        self.seq_before_step = -1
        self.stopped = False  # stopped at max_steps
        # id(dataset) -> where the user built its DataLoader
        self.loader_sites: dict[int, Any] = {}

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

        self._pre_hook = optimizer_mod.register_optimizer_step_pre_hook(self._pre_step)
        self._handles = [optimizer_mod.register_optimizer_step_post_hook(self._post_step)]
        for owner, name, replacement in replacements(self):
            self._patch(owner, name, replacement)
        self._warning_hook = install_warning_relay()

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._patches.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, replacement)

    def uninstall(self) -> None:
        if self._pre_hook is not None:
            self._pre_hook.remove()
            self._pre_hook = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for owner, name, original in reversed(self._patches):
            setattr(owner, name, original)
        self._patches = []
        if self._warning_hook is not None:
            remove_warning_relay(self._warning_hook)
            self._warning_hook = None

    def _dispatch(self, method: str, event: Any) -> None:
        if self._muted:
            return
        for handler in self._handlers.get(method, ()):
            try:
                handler(self, event)
            except Exception as exc:  # a doctor's bug must never break the user's training
                self._disable(handler, exc)

    def unsubscribe(self, probe: Any, *events: str) -> None:
        """Stop sending ``events`` to ``probe``: it has seen what it needed, and a probe
        that judges the first steps then costs the training nothing."""

        def keep(name: str, handler: Any) -> bool:
            return name not in events or getattr(handler, "__self__", handler) is not probe

        self._handlers = {
            name: tuple(h for h in hs if keep(name, h)) for name, hs in self._handlers.items()
        }

    def _disable(self, handler: Any, exc: Exception) -> None:
        probe = getattr(handler, "__self__", handler)
        self.errors.append(f"{type(probe).__name__}: {type(exc).__name__}: {exc}")
        self._handlers = {
            name: tuple(h for h in hs if getattr(h, "__self__", h) is not probe)
            for name, hs in self._handlers.items()
        }

    def watch_model(self, model: nn.Module) -> None:
        """Tell the probes about a model before it runs (they find models by themselves)."""
        for probe in self.probes:
            if hasattr(probe, "watch_model"):
                probe.watch_model(model)

    def model_name(self, model: nn.Module) -> str:
        """The name the user's code holds ``model`` by, where its first forward ran
        (``model`` when it could not be told)."""
        return self._model_names.get(getattr(model, "module", model), "model")

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
        """The run is over: probes that judge the whole run speak now."""
        for probe in self.probes:
            if hasattr(probe, "on_end"):
                try:
                    probe.on_end(self)
                except Exception as exc:
                    self._disable(probe.on_end, exc)

    # ---- events -------------------------------------------------------------------------------

    def _on_forward(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        known = self._models.get(module)
        frame = sys._getframe(2)
        if known is None:
            known = self._models[module] = _is_model(module)
            name = variable_name(module, frame) if known else None
            if name is not None:
                self._model_names[module] = name
        if not known:
            return  # a loss module: no weights, nothing for the probes to watch
        grad = torch.is_grad_enabled()
        if grad:
            record = self.last_forward = ForwardRecord(self.steps, module, args, frame)
            if not self.step_forwards or self.step_forwards[0].steps != self.steps:
                self.step_forwards = [record]
            elif len(self.step_forwards) < 8:
                self.step_forwards.append(record)
        event = ForwardEvent(module, args, kwargs, output, grad, frame)
        self._dispatch("on_forward", event)

    def _on_backward(self, tensor: torch.Tensor, retain_graph: bool) -> None:
        fn = tensor.grad_fn
        self._prev_backward_seq = self._backward_seq
        if fn is not None:
            self._backward_seq = fn._sequence_nr()
        self.last_backward = weakref.ref(tensor)
        event = BackwardEvent(tensor, retain_graph, sys._getframe(2))
        self._dispatch("on_backward", event)

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._handlers["on_pre_step"]:
            # args holds the optimizer itself first, then step's own arguments.
            closure = (len(args) > 1 and args[1] is not None) or kwargs.get("closure") is not None
            event = StepEvent(optimizer, self.steps + 1, sys._getframe(1), closure)
            self._dispatch("on_pre_step", event)

    def count_step(self) -> None:
        """One more optimizer step (or a manual update of the weights); stops the
        script at ``max_steps``."""
        self.steps += 1
        # Called at the backward after the update: the mark is the backward before it,
        # and this step's forwards ran before it was counted.
        self.seq_before_step = self._prev_backward_seq
        for record in self.step_forwards:
            record.steps = self.steps
        if self.max_steps is not None and self.steps >= self.max_steps:
            self.stopped = True
            raise StopTraining(f"stopped after {self.steps} optimizer steps")

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1
        self.seq_before_step = self._backward_seq
        if self._pre_hook is not None and not self._handlers["on_pre_step"]:
            # No probe asks any more: torch need not call it. Removed here, not from
            # inside the pre-hook loop, whose dict must not change while it runs.
            self._pre_hook.remove()
            self._pre_hook = None
        event = StepEvent(optimizer, self.steps, sys._getframe(1))
        self._dispatch("on_step", event)
        del event  # holds the user's frame: let it go before the script continues
        if self.max_steps is not None and self.steps >= self.max_steps:
            self.stopped = True
            raise StopTraining(f"stopped after {self.steps} optimizer steps")


class ForwardRecord:
    """The last training forward, weakly: its model, its positional inputs (tensors, or
    tuples of them, as an RNN's state), the step it ran in and the line that called it."""

    __slots__ = ("steps", "module", "args", "inputs", "file", "line")

    def __init__(self, steps: int, module: nn.Module, args: tuple, frame: Any) -> None:
        self.steps = steps
        self.module = weakref.ref(module)
        self.args: list[tuple[int, Any]] = []  # (position, weak ref or a plain value)
        # (position, sequence number of its graph node) of the inputs with a graph
        self.inputs: list[tuple[int, int]] = []
        for i, a in enumerate(args[:4]):
            if isinstance(a, torch.Tensor):
                self.args.append((i, weakref.ref(a)))
                if a.grad_fn is not None:
                    self.inputs.append((i, a.grad_fn._sequence_nr()))
            elif isinstance(a, tuple) and a and all(isinstance(t, torch.Tensor) for t in a[:4]):
                self.args.append((i, _TupleRef([weakref.ref(t) for t in a[:4]])))
                self.inputs += [(i, t.grad_fn._sequence_nr()) for t in a[:4] if t.grad_fn]
            else:
                self.args.append((i, _Plain(a)))
        self.file, self.line = frame.f_code.co_filename, frame.f_lineno


class _TupleRef:
    __slots__ = ("refs",)

    def __init__(self, refs: list[Any]) -> None:
        self.refs = refs

    def __call__(self) -> Any:
        items = tuple(r() for r in self.refs)
        return None if any(t is None for t in items) else items


class _Plain:
    """A non-tensor argument (an int, None), held plainly: it holds no memory."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value if isinstance(value, (int, float, bool, str, type(None))) else None

    def __call__(self) -> Any:
        return self.value
