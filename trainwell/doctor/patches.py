"""The patches that turn torch calls into events: one factory per wrapped call, each
taking the dispatcher (``doctor``) the wrapper reports to.

A wrapper is one Python call around the original; what it sends is an event of
:mod:`trainwell.doctor.events`. :func:`replacements` lists them all, for the dispatcher
to install and remove. Warnings that torch raises inside a wrapped call are shown at the
user's line (:func:`show_at_user_line`), not at the wrapper's.
"""

from __future__ import annotations

import functools
import os
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import torch
from torch import nn

from trainwell.doctor.calls import call_patches
from trainwell.doctor.clock import others_queued, queued
from trainwell.doctor.events import (
    LOSSES,
    BatchEvent,
    CreatedEvent,
    EpochEndEvent,
    LossEvent,
    ModeEvent,
    ScalerStepEvent,
    ScalerUpdateEvent,
    SchedulerStepEvent,
    ZeroGradEvent,
)
from trainwell.doctor.sites import is_user_file, made_at, site_of_caller

_DOCTOR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _module_call(doctor: Any) -> Any:
    call = nn.Module.__call__

    def module_call(module, *args, **kwargs):
        # A wrapper, not a global forward hook: a global hook sends every layer down
        # PyTorch's slow path; this costs one Python call per module and counts depth,
        # so the outermost call (the model's forward) is known exactly. Inside a model
        # the call only passes through.
        if doctor._depth:
            return call(module, *args, **kwargs)
        doctor._depth += 1
        try:
            output = call(module, *args, **kwargs)
        finally:
            doctor._depth -= 1
        if doctor._depth == 0:
            doctor._on_forward(module, args, kwargs, output)
        return output

    return module_call


def _tensor_backward(doctor: Any) -> Any:
    backward = torch.Tensor.backward

    def tensor_backward(tensor, gradient=None, retain_graph=None, create_graph=False,
                        inputs=None):  # fmt: skip
        doctor._on_backward(tensor, bool(retain_graph))
        return backward(tensor, gradient, retain_graph, create_graph, inputs)

    return tensor_backward


def _zero_grad(doctor: Any) -> Any:
    zero_grad = torch.optim.Optimizer.zero_grad

    def optimizer_zero_grad(optimizer, *args, **kwargs):
        if doctor._handlers["on_zero_grad"]:
            doctor._dispatch("on_zero_grad", ZeroGradEvent(optimizer))
        return zero_grad(optimizer, *args, **kwargs)

    return optimizer_zero_grad


def _optimizer_init(doctor: Any) -> Any:
    optimizer_init = torch.optim.Optimizer.__init__

    def optimizer_created(optimizer, *args, **kwargs):
        optimizer_init(optimizer, *args, **kwargs)
        doctor._dispatch("on_optimizer_created", CreatedEvent(optimizer, made_at(1)))

    return optimizer_created


# After a wait for a batch under this (less its time queued for a CPU), far from
# data-bottleneck's 5 ms, the next one skips reading the other threads' queueing: what
# it is read for only ever shortens a wait.
SLOW_WAIT_S = 0.001


def _most_queued(before: dict[str, float] | None) -> float:
    """The longest any other thread sat queued for a CPU since ``before`` was read."""
    if not before:
        return 0.0
    after = others_queued()
    return max((after[k] - before[k] for k in after.keys() & before.keys()), default=0.0)


def _loader_next(doctor: Any, next_batch: Any) -> Any:
    def loader_next(it):
        # Loading in this process: the other threads' queueing too (see _most_queued),
        # while its waits are long enough to matter (two reads cost about 60 us).
        slow = it._num_workers == 0 and getattr(it, "_trainwell_slow", True)
        others = others_queued() if slow else None
        start, start_queued, start_cpu = time.perf_counter(), queued(), time.thread_time()
        try:
            batch = next_batch(it)
        except StopIteration:
            doctor._dispatch("on_epoch_end", EpochEndEvent(it._dataset))
            raise
        wait, wait_queued = time.perf_counter() - start, queued() - start_queued
        wait_cpu, others_wait = time.thread_time() - start_cpu, _most_queued(others)
        it._trainwell_slow = wait - wait_queued >= SLOW_WAIT_S
        if doctor.swap_batch is not None:
            batch = doctor.swap_batch(it, batch)
        if it._num_yielded == 1:  # the loop's line, found once per pass over the data
            it._trainwell_site = site_of_caller(1)
        site = getattr(it, "_trainwell_site", None)
        # Kept for the NaN explanations (is the data itself bad?) until the next batch.
        doctor.last_batch = event = BatchEvent(it, batch, wait, it._num_yielded, site,
                                               start_queued, wait_queued, wait_cpu,
                                               others_wait)  # fmt: skip
        doctor._dispatch("on_batch", event)
        return batch

    return loader_next


def _loader_init(doctor: Any, loader_init: Any) -> Any:
    def loader_created(loader, dataset, *args, **kwargs):
        loader_init(loader, dataset, *args, **kwargs)
        # Where a data-bottleneck's fix goes: num_workers / pin_memory of this call.
        doctor.loader_sites[id(dataset)] = made_at(1)

    return loader_created


def _module_train(doctor: Any) -> Any:
    train = nn.Module.train

    def module_train(module, mode=True):
        # train() recurses into the children: only the outermost call is an event.
        doctor._mode_depth += 1
        try:
            result = train(module, mode)
        finally:
            doctor._mode_depth -= 1
        if not doctor._mode_depth:
            doctor._dispatch("on_mode", ModeEvent(module, site_of_caller(1), bool(mode)))
        return result

    return module_train


def _scheduler_step(doctor: Any, step: Any) -> Any:
    @functools.wraps(step)
    def scheduler_step(scheduler, *args, **kwargs):
        # The steps a scheduler's constructor takes are not the user's.
        if not doctor._creating and doctor._handlers["on_scheduler_step"]:
            doctor._dispatch("on_scheduler_step", SchedulerStepEvent(scheduler))
        return step(scheduler, *args, **kwargs)

    return scheduler_step


def _scheduler_init(doctor: Any, init: Any) -> Any:
    @functools.wraps(init)
    def scheduler_created(scheduler, *args, **kwargs):
        # A subclass's __init__ calls the base's: only the outermost is the creation.
        doctor._creating += 1
        try:
            init(scheduler, *args, **kwargs)
        finally:
            doctor._creating -= 1
        if not doctor._creating:
            doctor._dispatch("on_scheduler_created", CreatedEvent(scheduler, made_at(1)))

    return scheduler_created


def _schedulers(doctor: Any) -> Iterator[tuple[Any, str, Any]]:
    """Every scheduler class of torch that defines its own ``__init__`` or ``step``
    (SequentialLR, ChainedScheduler, ReduceLROnPlateau and CosineAnnealingWarmRestarts
    do not go through the base class's)."""
    from torch.optim import lr_scheduler

    for cls in vars(lr_scheduler).values():
        if not isinstance(cls, type) or not issubclass(cls, lr_scheduler.LRScheduler):
            continue
        if "step" in vars(cls):
            yield cls, "step", _scheduler_step(doctor, vars(cls)["step"])
        if "__init__" in vars(cls):
            yield cls, "__init__", _scheduler_init(doctor, vars(cls)["__init__"])


def _loss(doctor: Any, name: str) -> Any:
    original = getattr(torch.nn.functional, name)

    @functools.wraps(original)
    def loss(input, target, *args, **kwargs):
        if doctor._handlers["on_loss"]:
            event = LossEvent(name, input, target, kwargs, sys._getframe(1))
            doctor._dispatch("on_loss", event)
        return original(input, target, *args, **kwargs)

    return loss


def _scaler(doctor: Any) -> tuple[tuple[Any, str, Any], tuple[Any, str, Any]]:
    scaler_cls = torch.amp.GradScaler
    step, update = scaler_cls.step, scaler_cls.update

    def scaler_step(scaler, optimizer, *args, **kwargs):
        event = ScalerStepEvent(scaler, optimizer, sys._getframe(1))
        doctor._dispatch("on_scaler_step", event)
        return step(scaler, optimizer, *args, **kwargs)

    def scaler_update(scaler, new_scale=None):
        scale = getattr(scaler, "_scale", None)
        before = scale.clone() if scale is not None and scaler.is_enabled() else None
        result = update(scaler, new_scale)
        if before is not None:
            event = ScalerUpdateEvent(scaler, before, sys._getframe(1))
            doctor._dispatch("on_scaler_update", event)
        return result

    return (scaler_cls, "step", scaler_step), (scaler_cls, "update", scaler_update)


_SCHEDULER = ("on_scheduler_created", "on_scheduler_step")


def replacements(doctor: Any) -> Iterator[tuple[Any, str, Any, tuple[str, ...]]]:
    """(owner, attribute, wrapper, events) for every torch call the doctor wraps;
    ``events``: the only events the wrapper serves, so that it can come off torch while
    no probe listens to them (none: the dispatcher itself needs it)."""
    from torch.utils.data import dataloader

    it_cls, loader_cls = dataloader._BaseDataLoaderIter, dataloader.DataLoader
    yield nn.Module, "__call__", _module_call(doctor), ()
    yield nn.Module, "train", _module_train(doctor), ("on_mode",)
    yield torch.Tensor, "backward", _tensor_backward(doctor), ()
    yield torch.optim.Optimizer, "zero_grad", _zero_grad(doctor), ("on_zero_grad",)
    yield torch.optim.Optimizer, "__init__", _optimizer_init(doctor), ("on_optimizer_created",)
    # The constructor's wrapper also tells the step's which steps are the constructor's.
    yield from ((*r, _SCHEDULER) for r in _schedulers(doctor))
    yield it_cls, "__next__", _loader_next(doctor, it_cls.__next__), ()
    yield loader_cls, "__init__", _loader_init(doctor, loader_cls.__init__), ()
    step, update = _scaler(doctor)
    yield (*step, ("on_scaler_step",))
    yield (*update, ("on_scaler_update",))
    for name in LOSSES:
        yield torch.nn.functional, name, _loss(doctor, name), ("on_loss",)
    yield from call_patches(doctor)


class Patch:
    """One wrapped torch call, on or off; ``events``: the only events it serves (none:
    the dispatcher itself needs it, always on)."""

    __slots__ = ("owner", "name", "original", "wrapper", "events", "on")

    def __init__(self, owner: Any, name: str, wrapper: Any, events: tuple[str, ...]) -> None:
        self.owner, self.name, self.wrapper, self.events = owner, name, wrapper, events
        self.original = owner.__dict__[name]
        self.on = False

    def put(self, on: bool, force: bool = False) -> None:
        if on and not self.on:
            self.original = self.owner.__dict__[self.name]
            setattr(self.owner, self.name, self.wrapper)
            self.on = True
        elif not on and self.on and (force or self.owner.__dict__.get(self.name) is self.wrapper):
            # Mid-run, only from the top: someone else's wrapper over ours stays whole.
            setattr(self.owner, self.name, self.original)
            self.on = False


class show_at_user_line:  # noqa: N801 - used as the function it replaces
    """A ``warnings.showwarning`` that moves a warning attributed to one of the doctor's
    wrappers (torch's ``stacklevel`` counts the wrapper as its caller) to the line that
    called the wrapper: the user's, as it would be without the doctor. ``original`` is
    the ``showwarning`` it calls."""

    def __init__(self, original: Callable[..., None]) -> None:
        self.original = original

    def __call__(
        self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
        file: TextIO | None = None, line: str | None = None,
    ) -> None:  # fmt: skip
        if filename.startswith(_DOCTOR_DIR):
            frame = _caller_of_wrapper(filename, lineno)
            if frame is not None:
                filename, lineno, line = frame.f_code.co_filename, frame.f_lineno, None
        self.original(message, category, filename, lineno, file, line)


def _caller_of_wrapper(filename: str, lineno: int) -> types.FrameType | None:
    """The first frame outside the doctor (and, after it, outside the libraries when a
    user frame is on the stack) above the wrapper's frame at ``filename:lineno``."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and not (
        frame.f_code.co_filename == filename and frame.f_lineno == lineno
    ):
        frame = frame.f_back
    while frame is not None and frame.f_code.co_filename.startswith(_DOCTOR_DIR):
        frame = frame.f_back
    if frame is not None and not is_user_file(frame.f_code.co_filename):
        user: types.FrameType | None = frame
        while user is not None and not is_user_file(user.f_code.co_filename):
            user = user.f_back
        frame = user or frame
    return frame


def install_warning_relay() -> show_at_user_line:
    """Install :class:`show_at_user_line`; returns the hook to give to
    :func:`remove_warning_relay`."""
    hook = show_at_user_line(warnings.showwarning)
    warnings.showwarning = hook
    return hook


def remove_warning_relay(hook: show_at_user_line) -> None:
    # Put the original back only if no one replaced ours meanwhile (pytest, the user).
    if warnings.showwarning is hook:
        warnings.showwarning = hook.original
