"""The doctor's frame: training events from PyTorch's global hooks, dispatched to probes.

A user's own script is watched with no code change: a wrapper around
``nn.Module.__call__`` (the outermost call is a model's forward), global optimizer step
hooks and wrappers around ``Tensor.backward``,
``Optimizer.zero_grad``, ``LRScheduler.step`` and DataLoader iteration turn its training
into events: batch fetched (with the wait), root forward (train or eval), backward,
zero_grad, optimizer step, scheduler step, epoch end. Probes are plain objects with any
of ``on_batch``, ``on_forward``, ``on_backward``, ``on_zero_grad``, ``on_step``,
``on_scheduler_step``, ``on_epoch_end``, ``on_end`` (duck-typed, as Lightning Fabric
calls callbacks); each reports findings through :meth:`Doctor.add`, once per
(code, file, line). Everything installed is removed on exit.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import time
import types
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
    """A model's forward (the outermost module call) finished."""

    def __init__(self, module: nn.Module, output: Any, grad_enabled: bool, frame: Any) -> None:
        super().__init__(frame)
        self.module, self.output, self.grad_enabled = module, output, grad_enabled


class BackwardEvent(_LazySite):
    """``tensor.backward()`` is about to run."""

    def __init__(self, tensor: torch.Tensor, retain_graph: bool, frame: Any) -> None:
        super().__init__(frame)
        self.tensor, self.retain_graph = tensor, retain_graph


@dataclass
class BatchEvent:
    """A batch came out of a DataLoader after ``wait_s`` seconds."""

    loader: Any
    batch: Any
    wait_s: float
    index: int  # batches taken from this iterator so far, this one included


class StepEvent(_LazySite):
    """``optimizer.step()`` finished; ``frame`` is the user's frame that called it."""

    def __init__(self, optimizer: torch.optim.Optimizer, step: int, frame: Any) -> None:
        super().__init__(frame)
        self.optimizer, self.step = optimizer, step


EVENTS = (
    "on_batch",
    "on_forward",
    "on_backward",
    "on_zero_grad",
    "on_step",
    "on_scheduler_step",
    "on_epoch_end",
)


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
        self._keys: set[tuple[str, str, int]] = set()
        self._depth = 0  # nesting of module calls: 0 outside any model
        self._handles: list[Any] = []
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
                doctor._on_forward(module, output)
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

        from torch.optim import lr_scheduler
        from torch.utils.data import dataloader

        sched_step = lr_scheduler.LRScheduler.step

        def scheduler_step(scheduler, *args, **kwargs):
            doctor._dispatch("on_scheduler_step", scheduler)
            return sched_step(scheduler, *args, **kwargs)

        next_batch = dataloader._BaseDataLoaderIter.__next__

        def loader_next(it):
            start = time.perf_counter()
            try:
                batch = next_batch(it)
            except StopIteration:
                doctor._dispatch("on_epoch_end", it._dataset)
                raise
            event = BatchEvent(it, batch, time.perf_counter() - start, it._num_yielded)
            doctor._dispatch("on_batch", event)
            return batch

        self._patch(nn.Module, "__call__", module_call)
        self._patch(torch.Tensor, "backward", tensor_backward)
        self._patch(torch.optim.Optimizer, "zero_grad", optimizer_zero_grad)
        self._patch(lr_scheduler.LRScheduler, "step", scheduler_step)
        self._patch(dataloader._BaseDataLoaderIter, "__next__", loader_next)

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._patches.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, replacement)

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for owner, name, original in reversed(self._patches):
            setattr(owner, name, original)
        self._patches = []

    def _dispatch(self, method: str, event: Any) -> None:
        for handler in self._handlers.get(method, ()):
            try:
                handler(self, event)
            except Exception as exc:  # a doctor's bug must never break the user's training
                self._disable(handler, exc)

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

    def _on_forward(self, module: nn.Module, output: Any) -> None:
        event = ForwardEvent(module, output, torch.is_grad_enabled(), sys._getframe(2))
        self._dispatch("on_forward", event)

    def _on_backward(self, tensor: torch.Tensor, retain_graph: bool) -> None:
        event = BackwardEvent(tensor, retain_graph, sys._getframe(2))
        self._dispatch("on_backward", event)

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1
        event = StepEvent(optimizer, self.steps, sys._getframe(1))
        self._dispatch("on_step", event)
        del event  # holds the user's frame: let it go before the script continues
        if self.max_steps is not None and self.steps >= self.max_steps:
            raise StopTraining(f"stopped after {self.steps} optimizer steps")
