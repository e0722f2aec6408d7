"""The events the doctor sends its probes, and the ``Reporter`` a probe reports to.

Probes are plain objects with any of the ``on_*`` methods named in :data:`EVENTS` (and
``on_end``), duck-typed; each is called with the :class:`Reporter` and the event.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import LazySite, Site, is_user_file


class Reporter(Protocol):
    """What a probe may use of the doctor: report, stop listening, run the model muted."""

    steps: int
    crashed: bool
    findings: list[Finding]
    loader_sites: dict[int, Site | None]  # id(dataset) -> where its DataLoader was built

    def add(self, finding: Finding) -> None: ...

    def count_step(self) -> None: ...

    def unsubscribe(self, probe: Any, *events: str) -> None: ...

    def muted(self) -> AbstractContextManager[None]: ...

    def model_name(self, model: nn.Module) -> str: ...


class ForwardEvent(LazySite):
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


class BackwardEvent(LazySite):
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
CLASSIFICATION_LOSSES = ("cross_entropy", "nll_loss", "binary_cross_entropy_with_logits",
                         "binary_cross_entropy")  # fmt: skip
# The regression losses, watched for targets broadcast against outputs.
REGRESSION_LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")
LOSSES = CLASSIFICATION_LOSSES + REGRESSION_LOSSES


class StopTraining(BaseException):
    """Raised from the optimizer step hook to stop a script after ``max_steps`` steps.

    A BaseException, so a script's ``except Exception`` does not swallow it.
    """
