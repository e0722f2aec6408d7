"""The doctor's frame: training events from PyTorch's global hooks, dispatched to probes.

A user's own script is watched with no code change: a wrapper around
``nn.Module.__call__`` (the outermost call is a model's forward), global optimizer step
hooks and wrappers around ``Tensor.backward``,
``Optimizer.zero_grad``, ``LRScheduler.step`` and DataLoader iteration turn its training
into events: batch fetched (with the wait), root forward (train or eval), backward,
zero_grad, optimizer step (before and after), scheduler step, epoch end. Wrappers around
the classification losses (``F.cross_entropy``, ``F.nll_loss``, the two binary cross
entropies), ``GradScaler.step`` / ``update``, ``Module.train`` and the optimizer and
scheduler constructors add: loss computed, scaler step and update, mode switched,
optimizer or scheduler created (with the line that made it). Probes are plain objects
with any of the ``on_*`` methods in :data:`EVENTS` and ``on_end`` (duck-typed, as
Lightning Fabric calls callbacks); each reports findings through :meth:`Doctor.add`,
once per (code, file, line). Everything installed is removed on exit.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import sys
import sysconfig
import time
import types
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import trainwell
from trainwell.doctor.findings import Finding

_LIBRARY_DIRS = tuple(
    os.path.dirname(p) + os.sep for p in (torch.__file__, trainwell.__file__)
) + tuple(p + os.sep for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]})


@functools.lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """Code the user wrote: not torch, not trainwell, not the standard library or
    installed packages (the doctor never points into those)."""
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    return not path.startswith(_LIBRARY_DIRS)


def _is_model(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def _site(skip: int) -> Site | None:
    """The user's line that called the function ``skip`` frames up."""
    return Site.of(user_frame(start=sys._getframe(skip + 1)))


def _made_at(skip: int) -> Site | None:
    """Where an object was made, for the user: the line that calls a factory of theirs
    (``optimizer = make_optimizer(model)``) rather than the factory's ``return``."""
    frame = user_frame(start=sys._getframe(skip + 1))
    while frame is not None and frame.f_back is not None and _is_return(frame):
        outer = user_frame(start=frame.f_back)
        if outer is None:
            break
        frame = outer
    return Site.of(frame)


def _is_return(frame: types.FrameType) -> bool:
    from trainwell.doctor.source import parse

    tree = parse(frame.f_code.co_filename)
    if tree is None:
        return False
    line = frame.f_lineno
    return any(isinstance(n, ast.Return) and n.lineno <= line <= (n.end_lineno or n.lineno)
               for n in ast.walk(tree))  # fmt: skip


def here() -> Site | None:
    """The innermost line of user code on the stack now (a probe asks from an event)."""
    return Site.of(user_frame(start=sys._getframe(1)))


def user_frame(skip: int = 1, start: types.FrameType | None = None) -> types.FrameType | None:
    """The innermost frame of user code on the current stack (or from ``start`` out)."""
    frame: types.FrameType | None = start or sys._getframe(skip)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


class _LazySite:
    """Where an event happened, found only when a probe asks: walking the stack on every
    event would cost more than most probes' work."""

    def __init__(self, frame: types.FrameType) -> None:
        self._frame: types.FrameType | None = frame
        self._site: Site | None = None

    @property
    def key(self) -> tuple[Any, int] | None:
        """A cheap stand-in for the site, to tell call sites apart without a stack walk."""
        if self._frame is None:
            return None if self._site is None else (self._site.file, self._site.line)
        return (self._frame.f_code, self._frame.f_lineno)

    def pin(self) -> Any:
        """The site as it is now, resolved only when called: the line is read now (a
        frame's line moves on), the file lookup and the walk out of library code wait,
        unless the direct caller is library code."""
        frame = self._frame
        if frame is not None and self._site is None:
            code, line = frame.f_code, frame.f_lineno
            if is_user_file(code.co_filename):
                return lambda: Site(code.co_filename, line)
        site = self.site
        return lambda: site

    @property
    def site(self) -> Site | None:
        if self._frame is not None:
            self._site = Site.of(user_frame(start=self._frame))
            self._frame = None  # let the frames go
        return self._site

    @property
    def frame(self) -> types.FrameType | None:
        return user_frame(start=self._frame) if self._frame is not None else None


@dataclass
class Site:
    """A place in the user's code."""

    file: str
    line: int

    @classmethod
    def of(cls, frame: types.FrameType | None) -> Site | None:
        if frame is None:
            return None
        return cls(frame.f_code.co_filename, frame.f_lineno)


class ForwardEvent(_LazySite):
    """A model's forward (the outermost module call) finished; ``args`` and ``kwargs``
    are its inputs (a probe may call the model again on them)."""

    def __init__(
        self, module: nn.Module, args: tuple, kwargs: dict, output: Any, grad_enabled: bool,
        frame: Any,
    ) -> None:  # fmt: skip
        super().__init__(frame)
        self.module, self.output, self.grad_enabled = module, output, grad_enabled
        self.args, self.kwargs = args, kwargs
        self._caller = frame.f_code.co_filename

    def caller_is_user(self) -> bool:
        """Whether the user's code called the model directly (not a library helper)."""
        return is_user_file(self._caller)


class BackwardEvent(_LazySite):
    """``tensor.backward()`` is about to run."""

    def __init__(self, tensor: torch.Tensor, retain_graph: bool, frame: Any) -> None:
        super().__init__(frame)
        self.tensor, self.retain_graph = tensor, retain_graph
        self._value: Any = _UNREAD

    @property
    def value(self) -> float | None:
        """The loss as a float when it is one number on the CPU (read once, for every
        probe that asks); ``None`` otherwise: reading a GPU value makes the host wait."""
        if self._value is _UNREAD:
            t = self.tensor
            self._value = t.item() if t.numel() == 1 and t.device.type == "cpu" else None
        return self._value


_UNREAD = object()


@dataclass
class BatchEvent:
    """A batch came out of a DataLoader after ``wait_s`` seconds; ``site`` is the user's
    line that iterates the loader (the ``for`` statement)."""

    loader: Any  # the DataLoader's iterator
    batch: Any
    wait_s: float
    index: int  # batches taken from this iterator so far, this one included
    site: Site | None = None


class LossEvent(_LazySite):
    """A classification loss is about to be computed: ``name`` is the functional
    (``cross_entropy``, ``nll_loss``, ``binary_cross_entropy_with_logits``,
    ``binary_cross_entropy``), ``kwargs`` its keyword arguments."""

    def __init__(self, name: str, input: Any, target: Any, kwargs: dict, frame: Any) -> None:
        super().__init__(frame)
        self.name, self.input, self.target, self.kwargs = name, input, target, kwargs


class ScalerEvent(_LazySite):
    """``GradScaler.step(optimizer)`` was called (``optimizer`` set), or
    ``GradScaler.update()`` finished (``scale_before`` holds the scale it started from,
    still on the device: reading it would make the host wait)."""

    def __init__(self, scaler: Any, optimizer: Any, scale_before: Any, frame: Any) -> None:
        super().__init__(frame)
        self.scaler, self.optimizer, self.scale_before = scaler, optimizer, scale_before


@dataclass
class CreatedEvent:
    """An optimizer, an LR scheduler or a model's mode switch (``module.train(mode)``)
    happened at ``site`` in the user's code."""

    obj: Any
    site: Site | None
    mode: bool | None = None


class StepEvent(_LazySite):
    """``optimizer.step()`` finished; ``frame`` is the user's frame that called it."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, step: int, frame: Any, closure: bool = False
    ) -> None:
        super().__init__(frame)
        self.optimizer, self.step = optimizer, step
        self.closure = closure  # step(closure): the gradients are made inside the step


EVENTS = (
    "on_batch",
    "on_forward",
    "on_backward",
    "on_zero_grad",
    "on_pre_step",  # the optimizer (the event) is about to step
    "on_step",
    "on_scheduler_step",
    "on_epoch_end",
    "on_loss",
    "on_scaler_step",
    "on_scaler_update",
    "on_mode",
    "on_optimizer_created",
    "on_scheduler_created",
)

# The classification losses the probes look into (labels, probabilities, first loss).
LOSSES = ("cross_entropy", "nll_loss", "binary_cross_entropy_with_logits",
          "binary_cross_entropy")  # fmt: skip


def _scheduler_step(doctor: Doctor, step: Any) -> Any:
    @functools.wraps(step)
    def scheduler_step(scheduler, *args, **kwargs):
        # The steps a scheduler's constructor takes are not the user's.
        if not doctor._creating:
            doctor._dispatch("on_scheduler_step", scheduler)
        return step(scheduler, *args, **kwargs)

    return scheduler_step


def _scheduler_init(doctor: Doctor, init: Any) -> Any:
    @functools.wraps(init)
    def scheduler_created(scheduler, *args, **kwargs):
        # A subclass's __init__ calls the base's: only the outermost is the creation.
        doctor._creating += 1
        try:
            init(scheduler, *args, **kwargs)
        finally:
            doctor._creating -= 1
        if not doctor._creating:
            doctor._dispatch("on_scheduler_created", CreatedEvent(scheduler, _made_at(1)))

    return scheduler_created


class StopTraining(BaseException):
    """Raised from the optimizer step hook to stop a script after ``max_steps`` steps.

    A BaseException, so a script's ``except Exception`` does not swallow it.
    """


class Doctor:
    """Watches training through global hooks and collects findings.


    Example:
        >>> doc = Doctor(probes=[])
        >>> with doc:
        ...     pass
        >>> doc.findings
        []
    """

    def __init__(
        self,
        probes: list[Any] | None = None,
        max_steps: int | None = None,
        on_finding: Any = None,
    ) -> None:
        if probes is None:
            from trainwell.doctor.probes import default_probes

            probes = default_probes()
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
        self._creating = 0  # inside a scheduler's constructor
        self._muted = False  # a probe is replaying a forward: no events meanwhile
        # (iterator, batch) -> the batch the script gets: the overfit check's hook
        self.swap_batch: Any = None
        self._handles: list[Any] = []
        self._pre_hook: Any = None
        self._patches: list[tuple[Any, str, Any]] = []

    # ---- reporting ------------------------------------------------------------------------

    def add(self, finding: Finding) -> None:
        """Keep ``finding`` unless the same (code, file, line) was reported already."""
        if finding.key not in self._keys:
            self._keys.add(finding.key)
            self.findings.append(finding)
            if self.on_finding is not None:
                self.on_finding(finding)

    # ---- installing the hooks ---------------------------------------------------------------

    def __enter__(self) -> Doctor:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()
        self.end()

    def install(self) -> None:
        from torch.optim import optimizer as optimizer_mod

        self._pre_hook = optimizer_mod.register_optimizer_step_pre_hook(self._pre_step)
        self._handles = [optimizer_mod.register_optimizer_step_post_hook(self._post_step)]
        doctor = self
        call = nn.Module.__call__

        def module_call(module, *args, **kwargs):
            # A wrapper, not a global forward hook: a global hook sends every layer down
            # PyTorch's slow path; this costs one Python call per module and counts
            # depth, so the outermost call (the model's forward) is known exactly.
            doctor._depth += 1
            try:
                output = call(module, *args, **kwargs)
            finally:
                doctor._depth -= 1
            if doctor._depth == 0:
                doctor._on_forward(module, args, kwargs, output)
            return output

        backward = torch.Tensor.backward

        def tensor_backward(tensor, gradient=None, retain_graph=None, create_graph=False,
                            inputs=None):  # fmt: skip
            doctor._on_backward(tensor, bool(retain_graph))
            return backward(tensor, gradient, retain_graph, create_graph, inputs)

        zero_grad = torch.optim.Optimizer.zero_grad

        def optimizer_zero_grad(optimizer, *args, **kwargs):
            doctor._dispatch("on_zero_grad", optimizer)
            return zero_grad(optimizer, *args, **kwargs)

        optimizer_init = torch.optim.Optimizer.__init__

        def optimizer_created(optimizer, *args, **kwargs):
            optimizer_init(optimizer, *args, **kwargs)
            doctor._dispatch("on_optimizer_created", CreatedEvent(optimizer, _made_at(1)))

        from torch.utils.data import dataloader

        next_batch = dataloader._BaseDataLoaderIter.__next__

        def loader_next(it):
            start = time.perf_counter()
            try:
                batch = next_batch(it)
            except StopIteration:
                doctor._dispatch("on_epoch_end", it._dataset)
                raise
            wait = time.perf_counter() - start
            if doctor.swap_batch is not None:
                batch = doctor.swap_batch(it, batch)
            if it._num_yielded == 1:  # the loop's line, found once per pass over the data
                it._trainwell_site = _site(1)
            site = getattr(it, "_trainwell_site", None)
            doctor._dispatch("on_batch", BatchEvent(it, batch, wait, it._num_yielded, site))
            return batch

        train = nn.Module.train

        def module_train(module, mode=True):
            # train() recurses into the children: only the outermost call is an event.
            doctor._mode_depth += 1
            try:
                result = train(module, mode)
            finally:
                doctor._mode_depth -= 1
            if not doctor._mode_depth:
                doctor._dispatch("on_mode", CreatedEvent(module, _site(1), bool(mode)))
            return result

        self._patch(nn.Module, "__call__", module_call)
        self._patch(nn.Module, "train", module_train)
        self._patch(torch.Tensor, "backward", tensor_backward)
        self._patch(torch.optim.Optimizer, "zero_grad", optimizer_zero_grad)
        self._patch(torch.optim.Optimizer, "__init__", optimizer_created)
        self._patch_schedulers()
        self._patch(dataloader._BaseDataLoaderIter, "__next__", loader_next)
        self._patch_scaler()
        for name in LOSSES:
            self._patch(torch.nn.functional, name, self._loss_wrapper(name))

    def _patch_schedulers(self) -> None:
        """Every scheduler class of torch that defines its own ``__init__`` or ``step``
        (SequentialLR, ChainedScheduler, ReduceLROnPlateau and CosineAnnealingWarmRestarts
        do not go through the base class's)."""
        from torch.optim import lr_scheduler

        doctor = self
        for cls in vars(lr_scheduler).values():
            if not isinstance(cls, type) or not issubclass(cls, lr_scheduler.LRScheduler):
                continue
            if "step" in vars(cls):
                self._patch(cls, "step", _scheduler_step(doctor, vars(cls)["step"]))
            if "__init__" in vars(cls):
                self._patch(cls, "__init__", _scheduler_init(doctor, vars(cls)["__init__"]))

    def _loss_wrapper(self, name: str) -> Any:
        original = getattr(torch.nn.functional, name)
        doctor = self

        @functools.wraps(original)
        def loss(input, target, *args, **kwargs):
            if doctor._handlers["on_loss"]:
                event = LossEvent(name, input, target, kwargs, sys._getframe(1))
                doctor._dispatch("on_loss", event)
            return original(input, target, *args, **kwargs)

        return loss

    def _patch_scaler(self) -> None:
        scaler_cls = torch.amp.GradScaler
        step, update = scaler_cls.step, scaler_cls.update
        doctor = self

        def scaler_step(scaler, optimizer, *args, **kwargs):
            event = ScalerEvent(scaler, optimizer, None, sys._getframe(1))
            doctor._dispatch("on_scaler_step", event)
            return step(scaler, optimizer, *args, **kwargs)

        def scaler_update(scaler, new_scale=None):
            scale = getattr(scaler, "_scale", None)
            before = scale.clone() if scale is not None and scaler.is_enabled() else None
            result = update(scaler, new_scale)
            if before is not None:
                doctor._dispatch("on_scaler_update", ScalerEvent(scaler, None, before,
                                                                 sys._getframe(1)))  # fmt: skip
            return result

        self._patch(scaler_cls, "step", scaler_step)
        self._patch(scaler_cls, "update", scaler_update)

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

    @contextlib.contextmanager
    def muted(self) -> Iterator[None]:
        """No events inside: a probe runs the model itself (replaying a batch)."""
        muted, depth = self._muted, self._depth
        self._muted, self._depth = True, depth + 1
        try:
            yield
        finally:
            self._muted, self._depth = muted, depth

    def report(self) -> str:
        """The findings as text, one block each."""
        from trainwell.doctor.runner import report_text

        return report_text(self)

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
        if known is None:
            known = self._models[module] = _is_model(module)
        if not known:
            return  # a loss module: no weights, nothing for the probes to watch
        event = ForwardEvent(
            module, args, kwargs, output, torch.is_grad_enabled(), sys._getframe(2)
        )
        self._dispatch("on_forward", event)

    def _on_backward(self, tensor: torch.Tensor, retain_graph: bool) -> None:
        event = BackwardEvent(tensor, retain_graph, sys._getframe(2))
        self._dispatch("on_backward", event)

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._handlers["on_pre_step"]:
            # args holds the optimizer itself first, then step's own arguments.
            closure = (len(args) > 1 and args[1] is not None) or kwargs.get("closure") is not None
            event = StepEvent(optimizer, self.steps + 1, sys._getframe(1), closure)
            self._dispatch("on_pre_step", event)

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1
        if self._pre_hook is not None and not self._handlers["on_pre_step"]:
            # No probe asks any more: torch need not call it. Removed here, not from
            # inside the pre-hook loop, whose dict must not change while it runs.
            self._pre_hook.remove()
            self._pre_hook = None
        event = StepEvent(optimizer, self.steps, sys._getframe(1))
        self._dispatch("on_step", event)
        del event  # holds the user's frame: let it go before the script continues
        if self.max_steps is not None and self.steps >= self.max_steps:
            raise StopTraining(f"stopped after {self.steps} optimizer steps")
