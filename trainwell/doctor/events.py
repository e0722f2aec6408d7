"""The events the doctor sends its probes, and the ``Reporter`` a probe reports to.

Probes are plain objects with any of the ``on_*`` methods named in :data:`EVENTS` (and
``on_end``), duck-typed; each is called with the :class:`Reporter` and the event. A
forward under ``no_grad`` is sent as ``on_forward`` and then as ``on_nograd_forward``: a
probe that watches evaluations only subscribes to the second and costs the training
steps nothing.
"""

from __future__ import annotations

import math
from collections import deque
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import LazySite, Site, is_user_file, line_of, user_frame


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

    def unsubscribe(self, probe: Any, *events: str, until: int | None = None) -> None: ...

    def subscribe(self, probe: Any, *events: str) -> None: ...

    def muted(self) -> AbstractContextManager[None]: ...

    def model_name(self, model: nn.Module) -> str: ...

    def models(self) -> list[nn.Module]: ...


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


class BackwardEvent(LazySite):
    """``tensor.backward()`` is about to run. ``memo`` keeps what one probe worked out
    about this backward for the others (the first cause of a NaN loss): made once."""

    # Unread until a probe asks (class defaults: nothing to set at every backward).
    _value: Any = None
    _finite: Any = None
    _read = False
    _memo: dict[str, Any] | None = None

    def __init__(self, tensor: torch.Tensor, retain_graph: bool, frame: Any) -> None:
        self._frame = frame  # LazySite's, set here: made at every backward
        self.tensor, self.retain_graph = tensor, retain_graph

    @property
    def memo(self) -> dict[str, Any]:
        if self._memo is None:
            self._memo = {}
        return self._memo

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


_UNREAD = object()


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


class ForwardRecord:
    """A training forward of the current step, kept for the explanations that look back
    at it (a NaN's origin replays it, a crash names a state carried into it): the model,
    its inputs as given, the autocast state, the step it ran in and the calling line.

    The inputs are held until the next step's first forward: the step itself holds them
    about that long, and a replay needs them as they were.
    """

    __slots__ = ("steps", "module", "args", "kwargs", "autocast", "inputs", "code", "lasti",
                 "globals", "_site")  # fmt: skip

    def __init__(self, steps: int, module: nn.Module, args: tuple, kwargs: dict, frame: Any):
        self.steps = steps
        self.module, self.args, self.kwargs = module, args, kwargs
        # Read now: the state is the caller's, gone once the forward returns.
        self.autocast = _autocast_state() if _any_autocast() else None
        # (position, sequence number of its graph node) of the inputs with a graph, read
        # now: an in-place op on an input later would change its node.
        first = args[0] if len(args) == 1 else None
        if isinstance(first, torch.Tensor):  # model(x): the common case, inline
            fn = first.grad_fn
            self.inputs = [(0, fn._sequence_nr())] if fn is not None else _NO_INPUTS
        else:
            self.inputs = _graph_inputs(args)
        # The calling instruction; its line is looked up only when asked.
        self.code, self.lasti = frame.f_code, frame.f_lasti
        # The caller's module variables: a step function's, scanned for kept tensors when
        # the engine (not the user's frames) runs the step.
        self.globals = frame.f_globals
        # The user's line: the caller's when it is the user's (the common case), else
        # found now by walking out of the library (the frames go away).
        user = is_user_file(self.code.co_filename)
        self._site: Any = _UNREAD if user else Site.of(user_frame(start=frame))

    @property
    def file(self) -> str:
        return self.code.co_filename

    @property
    def line(self) -> int:
        return line_of(self.code, self.lasti)

    @property
    def site(self) -> Site | None:
        """The user's line that ran this forward (through library code, if any)."""
        return Site(self.file, self.line) if self._site is _UNREAD else self._site

    def autocast_for(self, device_type: str) -> tuple[str, Any] | None:
        """(device type, dtype) of the autocast the forward ran under on that device."""
        return next((a for a in self.autocast or () if a[0] == device_type), None)


_NO_INPUTS: list[tuple[int, int]] = []  # shared, never changed


def _graph_inputs(args: tuple) -> list[tuple[int, int]]:
    found = []
    for i, a in enumerate(args[:4]):
        if isinstance(a, torch.Tensor):
            if a.grad_fn is not None:
                found.append((i, a.grad_fn._sequence_nr()))
        elif isinstance(a, (tuple, list)) and a:
            # An LSTM's (h, c); a stacked model's list of per-layer (h, c) tuples.
            flat = [t for v in a[:4] for t in (v[:4] if isinstance(v, (tuple, list)) else (v,))]
            if all(isinstance(t, torch.Tensor) for t in flat):
                found += [(i, t.grad_fn._sequence_nr()) for t in flat if t.grad_fn is not None]
    return found


# One C call says whether any autocast is on; the per-device state is read only then.
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)
_AUTOCAST_DEVICES = ("cuda", "cpu", "xpu", "mps", "hpu")


def _autocast_state() -> tuple[tuple[str, Any], ...]:
    state = []
    for device in _AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(device):
                state.append((device, torch.get_autocast_dtype(device)))
        except (RuntimeError, TypeError):  # a device type this torch's autocast lacks
            continue
    return tuple(state)


@dataclass
class BatchEvent:
    """A batch came out of a DataLoader after ``wait_s`` seconds; ``site`` is the user's
    line that iterates the loader (the ``for`` statement). ``queued_s`` is
    :func:`~trainwell.doctor.clock.queued` when the wait began, ``wait_queued_s`` the
    part of the wait spent queued for a CPU (a busy machine's share of it)."""

    loader: Any  # the DataLoader's iterator
    batch: Any
    wait_s: float
    index: int  # batches taken from this iterator so far, this one included
    site: Site | None = None
    queued_s: float = 0.0
    wait_queued_s: float = 0.0


class LossEvent(LazySite):
    """A classification loss is about to be computed: ``name`` is the functional
    (``cross_entropy``, ``nll_loss``, ``binary_cross_entropy_with_logits``,
    ``binary_cross_entropy``), ``kwargs`` its keyword arguments."""

    def __init__(self, name: str, input: Any, target: Any, kwargs: dict, frame: Any) -> None:
        super().__init__(frame)
        self.name, self.input, self.target, self.kwargs = name, input, target, kwargs


class ScalerEvent(LazySite):
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


class StepEvent(LazySite):
    """``optimizer.step()`` finished; ``frame`` is the user's frame that called it.
    ``memo`` keeps what one probe worked out at this step for the others (who holds
    tensors): made once."""

    def __init__(
        self, optimizer: torch.optim.Optimizer | None, step: int, frame: Any, closure: bool = False
    ) -> None:
        self._frame = frame  # LazySite's, set here: made at every step
        self.optimizer, self.step = optimizer, step
        self.closure = closure  # step(closure): the gradients are made inside the step

    _memo: dict[str, Any] | None = None

    @property
    def memo(self) -> dict[str, Any]:
        if self._memo is None:
            self._memo = {}
        return self._memo


EVENTS = (
    "on_batch",
    "on_forward",
    "on_nograd_forward",  # a forward under no_grad / inference_mode (also an on_forward)
    "on_backward",
    "on_nonfinite_loss",  # a loss backwarded is NaN/Inf (the event: that backward's)
    "on_zero_grad",
    "on_pre_step",  # the optimizer (the event) is about to step
    "on_step",
    "on_update",  # a hand-written weight update, counted as a step (no optimizer: None)
    "on_scheduler_step",
    "on_epoch_end",
    "on_loss",
    "on_scaler_step",
    "on_scaler_update",
    "on_mode",
    "on_optimizer_created",
    "on_scheduler_created",
    "on_call",  # a rare torch call worth a look: DataParallel(...), torch.save, anomaly mode
    "on_clip",  # clip_grad_norm_ / clip_grad_value_ is about to clip
)

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
