"""The events the doctor sends its probes, the ``Reporter`` a probe reports to, and the
``Probe`` a probe is.

A probe is a plain object with any of the ``on_*`` methods named in :data:`EVENTS` (and
``on_end``); each is called as ``method(doc, event)`` with the :class:`Reporter` and an
event of the type :data:`EVENT_TYPES` gives (``on_end(doc)`` with no event). A forward
under ``no_grad`` is sent as ``on_forward`` and then as ``on_nograd_forward``: a probe
that watches evaluations only subscribes to the second and costs the training steps
nothing.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from trainwell.doctor.findings import Finding
from trainwell.doctor.records import ForwardRecord
from trainwell.doctor.sites import LazySite, Site, is_user_file


class Probe(Protocol):
    """What the dispatcher runs: any object. Its ``on_*`` methods are its subscriptions,
    each named in :data:`EVENTS` (or ``on_end``) and called as ``method(doc, event)``
    with the event type :data:`EVENT_TYPES` gives; a method named after no event is
    refused when the dispatcher is made (:func:`~trainwell.doctor.handlers.probe_handlers`).
    Every subscription is optional, so the Protocol requires no member; two more
    optional methods: ``attach(trackers)`` (:class:`~trainwell.doctor.trackers.Trackers`:
    what several probes follow, built once per run) and ``watch_model(model)``.

    Example:
        >>> class ZeroLr:
        ...     def on_step(self, doc: Reporter, event: StepEvent) -> None: ...
        >>> probe: Probe = ZeroLr()
    """


class Reporter(Protocol):
    """What a probe may use of the doctor: report, stop (and start again) listening, run
    the model muted, and what the doctor keeps of the current step."""

    steps: int
    crashed: bool
    findings: list[Finding]
    loader_sites: dict[int, Site | None]  # id(dataset) -> where its DataLoader was built
    step_forwards: list[ForwardRecord]  # this step's training forwards (first and last 4)
    last_batch: BatchEvent | None  # the last batch a DataLoader gave
    recent_losses: deque[float]  # the last finite losses (scalars on the CPU), newest last

    def add(self, finding: Finding) -> None: ...

    def count_step(self) -> None: ...

    def unsubscribe(self, probe: Probe, *events: str, until: int | None = None) -> None: ...

    def subscribe(self, probe: Probe, *events: str) -> None: ...

    def muted(self) -> AbstractContextManager[None]: ...

    def model_name(self, model: nn.Module) -> str: ...

    def models(self) -> list[nn.Module]: ...


# A probe's method for an event, as the dispatcher calls it (bound to the probe).
Handler = Callable[[Reporter, Any], None]


class ForwardEvent(LazySite):
    """A model's forward (the outermost module call) finished; ``args`` and ``kwargs``
    are its inputs (a probe may call the model again on them)."""

    def __init__(
        self, module: nn.Module, args: tuple, kwargs: dict, output: Any, grad_enabled: bool,
        frame: Any,
    ) -> None:  # fmt: skip
        self._frame = frame  # LazySite's, set here: made at every forward
        self.module, self.output, self.grad_enabled = module, output, grad_enabled
        self.args, self.kwargs = args, kwargs
        self._caller = frame.f_code.co_filename

    def caller_is_user(self) -> bool:
        """Whether the user's code called the model directly (not a library helper)."""
        return is_user_file(self._caller)


class _Memo:
    """``memo`` keeps what one probe worked out about this event for the others (who
    holds tensors at a step, the first cause of a NaN loss): made once, when first
    asked."""

    _memo: dict[str, Any] | None = None

    @property
    def memo(self) -> dict[str, Any]:
        if self._memo is None:
            self._memo = {}
        return self._memo


class BackwardEvent(_Memo, LazySite):
    """``tensor.backward()`` is about to run, the ``index``-th of the run. ``memo`` keeps
    what one probe worked out about this backward for the others (the first cause of a
    NaN loss): made once."""

    # Unread until a probe asks (class defaults: nothing to set at every backward).
    _value: Any = None
    _finite: Any = None
    _read = False

    def __init__(self, tensor: torch.Tensor, retain_graph: bool, frame: Any, index: int) -> None:
        self._frame = frame  # LazySite's, set here: made at every backward
        self.tensor, self.retain_graph, self.index = tensor, retain_graph, index

    def _read_loss(self) -> None:
        t = self.tensor
        if t.is_cpu:
            if t.numel() == 1:
                self._value = t.item()
                self._finite = math.isfinite(self._value)
            else:
                self._finite = bool(torch.isfinite(t.detach()).all())
        self._read = True

    @property
    def value(self) -> float | None:
        """The loss as a float when it is one number on the CPU (read once, for every
        probe that asks); ``None`` otherwise: reading a GPU value makes the host wait."""
        if not self._read:
            self._read_loss()
        return self._value

    @property
    def finite(self) -> bool | None:
        """Whether the loss is finite, for a loss on the CPU (read once, for every probe
        that asks); ``None`` on an accelerator, where reading it makes the host wait."""
        if not self._read:
            self._read_loss()
        return self._finite



class LossWatch:
    """Whether a backward's loss is NaN/Inf, without a host sync per step: a scalar on
    the CPU is read, one on an accelerator is folded into a flag on the device, read
    every ``DEVICE_EVERY`` backwards. The finite CPU scalars are kept, the last ones."""

    DEVICE_EVERY = 16

    def __init__(self, keep: int = 50) -> None:
        self.flag: torch.Tensor | None = None  # any non-finite loss since the last read
        self.backwards = 0  # on an accelerator
        self.recent: deque[float] = deque(maxlen=keep)

    def nonfinite(self, event: BackwardEvent) -> bool:
        finite = event.finite
        if finite:
            if event._value is not None:  # (read just now by finite)
                self.recent.append(event._value)
            return False
        if finite is not None:
            return True
        self.backwards += 1
        bad = ~torch.isfinite(event.tensor.detach()).all()
        self.flag = bad if self.flag is None else self.flag | bad
        return not self.backwards % self.DEVICE_EVERY and bool(self.flag)


@dataclass(slots=True)
class BatchEvent:
    """A batch came out of a DataLoader after ``wait_s`` seconds; ``site`` is the user's
    line that iterates the loader (the ``for`` statement). ``queued_s`` is
    :func:`~trainwell.doctor.clock.queued` when the wait began, ``wait_queued_s`` the
    part of the wait spent queued for a CPU (a busy machine's share of it),
    ``wait_cpu_s`` the CPU time this thread used in it (loading in the main process,
    ``num_workers=0``; next to none when workers load), ``wait_others_queued_s`` the
    longest any other thread of the process sat queued in it (measured for loading in
    the main process only)."""

    loader: Any  # the DataLoader's iterator
    batch: Any
    wait_s: float
    index: int  # batches taken from this iterator so far, this one included
    site: Site | None = None
    queued_s: float = 0.0
    wait_queued_s: float = 0.0
    wait_cpu_s: float = 0.0
    wait_others_queued_s: float = 0.0


@dataclass(slots=True)
class EpochEndEvent:
    """A DataLoader's iterator ran out: one pass over ``dataset`` (an epoch, an evaluation)
    is over."""

    dataset: Any


@dataclass(slots=True)
class ZeroGradEvent:
    """``optimizer.zero_grad()`` is about to run."""

    optimizer: torch.optim.Optimizer


@dataclass(slots=True)
class SchedulerStepEvent:
    """``scheduler.step()`` is about to run (a step the user's code takes, not the one a
    scheduler's constructor takes)."""

    scheduler: Any  # an LRScheduler or ReduceLROnPlateau


class LossEvent(LazySite):
    """A classification loss is about to be computed: ``name`` is the functional
    (``cross_entropy``, ``nll_loss``, ``binary_cross_entropy_with_logits``,
    ``binary_cross_entropy``), ``kwargs`` its keyword arguments."""

    def __init__(self, name: str, input: Any, target: Any, kwargs: dict, frame: Any) -> None:
        super().__init__(frame)
        self.name, self.input, self.target, self.kwargs = name, input, target, kwargs


class ScalerStepEvent(LazySite):
    """``GradScaler.step(optimizer)`` was called."""

    def __init__(self, scaler: Any, optimizer: torch.optim.Optimizer, frame: Any) -> None:
        super().__init__(frame)
        self.scaler, self.optimizer = scaler, optimizer


class ScalerUpdateEvent(LazySite):
    """``GradScaler.update()`` finished; ``scale_before`` holds the scale it started from,
    still on the device: reading it would make the host wait."""

    def __init__(self, scaler: Any, scale_before: torch.Tensor, frame: Any) -> None:
        super().__init__(frame)
        self.scaler, self.scale_before = scaler, scale_before


@dataclass(slots=True)
class CreatedEvent:
    """An optimizer or an LR scheduler was made at ``site`` in the user's code."""

    obj: Any
    site: Site | None


@dataclass(slots=True)
class ModeEvent:
    """The outermost ``module.train(mode)`` (or ``eval()``) of the user's code, at
    ``site``."""

    module: nn.Module
    site: Site | None
    mode: bool


class StepEvent(_Memo, LazySite):
    """``optimizer.step()`` is about to run (``on_pre_step``) or finished (``on_step``);
    ``frame`` is the user's frame that called it, ``step`` the optimizer steps counted so
    far with this one."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, step: int, frame: Any, closure: bool = False
    ) -> None:
        self._frame = frame  # LazySite's, set here: made at every step
        self.optimizer, self.step = optimizer, step
        self.closure = closure  # step(closure): the gradients are made inside the step


class UpdateEvent(_Memo, LazySite):
    """A hand-written weight update (no optimizer), counted as step ``step``."""

    def __init__(self, step: int, frame: Any) -> None:
        self._frame = frame
        self.step = step


class CallEvent(LazySite):
    """A watched torch call: ``name`` is what was called (``DataParallel``, ``save``,
    ``set_anomaly_enabled``, ``clip_grad_norm_``, ``clip_grad_value_``), ``args`` and
    ``kwargs`` its arguments (for a clip, ``args[0]`` is the list of tensors it clips;
    for ``DataParallel``, the wrapper object itself)."""

    def __init__(self, name: str, args: tuple, kwargs: dict, frame: Any) -> None:
        super().__init__(frame)
        self.name, self.args, self.kwargs = name, args, kwargs


# Each event a probe may subscribe to, and the type of what its handler is given.
EVENT_TYPES: dict[str, type] = {
    "on_batch": BatchEvent,
    "on_forward": ForwardEvent,
    # a forward under no_grad / inference_mode (also an on_forward)
    "on_nograd_forward": ForwardEvent,
    "on_backward": BackwardEvent,
    "on_nonfinite_loss": BackwardEvent,  # a loss backwarded is NaN/Inf: that backward's
    "on_zero_grad": ZeroGradEvent,
    "on_pre_step": StepEvent,
    "on_step": StepEvent,
    "on_update": UpdateEvent,  # a hand-written weight update, counted as a step
    "on_scheduler_step": SchedulerStepEvent,
    "on_epoch_end": EpochEndEvent,
    "on_loss": LossEvent,
    "on_scaler_step": ScalerStepEvent,
    "on_scaler_update": ScalerUpdateEvent,
    "on_mode": ModeEvent,
    "on_optimizer_created": CreatedEvent,
    "on_scheduler_created": CreatedEvent,
    # a rare torch call worth a look: DataParallel(...), torch.save, anomaly mode
    "on_call": CallEvent,
    "on_clip": CallEvent,  # clip_grad_norm_ / clip_grad_value_ is about to clip
}
EVENTS = tuple(EVENT_TYPES)
# Called once, as ``on_end(doc)``, when the run is over: no event.
END = "on_end"

# The classification losses the probes look into (labels, probabilities, first loss).
CLASSIFICATION_LOSSES = ("cross_entropy", "nll_loss", "binary_cross_entropy_with_logits",
                         "binary_cross_entropy")  # fmt: skip
# The regression losses, watched for targets broadcast against outputs.
REGRESSION_LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")
LOSSES = CLASSIFICATION_LOSSES + REGRESSION_LOSSES


class StopTraining(BaseException):
    """Raised from the optimizer step hook to stop a script after ``max_steps`` steps.

    A BaseException, so a script's ``except Exception`` does not swallow it.
    """
