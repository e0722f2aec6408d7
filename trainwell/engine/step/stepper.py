"""One optimizer step, the engine's way: used by training, the overfit check and lr-find.

zero grads -> per micro-batch: batch to the device, the step function under autocast,
loss / accum, backward (through the GradScaler for fp16; DDP all-reduces on the last
micro-batch only) -> unscale -> clip -> optimizer step. The scheduler is the caller's:
training steps it per optimizer step, lr-find sets the lr itself.

The same code for the three callers is the point: what the overfit check and the lr
range test report carries over to the real run only if they train exactly as it does.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainwell.engine.distributed.compiling import compile_failure_line, is_compile_error
from trainwell.engine.distributed.placement import no_sync
from trainwell.engine.loading.batch import sample_count, to_device
from trainwell.engine.state.metrics import MetricSums
from trainwell.engine.step.anatomy import StepClock
from trainwell.engine.step.precision import Precision
from trainwell.engine.step.step_fn import StepFn, unpack
from trainwell.errors import UserError

if TYPE_CHECKING:
    from trainwell.engine.loading.loaders import TrainData


@dataclass
class Stepper:
    """Takes optimizer steps: ``stepper(micro_batches, sums)`` is one.

    Attributes:
        net: the model the step function gets (the DDP wrapper on several processes).
        step_fn: ``step(model, batch) -> loss | {"loss": ..., ...}``.
        optimizer, precision: the run's.
        grad_clip: max global gradient norm (0: off).
        device: where batches go.
        inspect: called on each batch before it moves to the device (the label check of
            the first epoch); ``None`` for nothing.
        clock: marks the end of each phase of the step (copy, compute) for the step
            anatomy (:mod:`trainwell.engine.step.anatomy`); ``None`` for no timing. The
            optimizer's phase is the caller's to mark, once its scheduler has stepped.
        eager: with ``net`` compiled (``train.compile``), the module without compilation:
            should the first step fail to compile, ``on_compile_failure(reason)`` is told
            and training goes on eager with it.

    Example:
        >>> from trainwell.engine.step.step_fn import LossStep
        >>> net = nn.Linear(2, 2)
        >>> stepper = Stepper(net, LossStep(nn.CrossEntropyLoss()),
        ...                   torch.optim.SGD(net.parameters(), lr=0.1),
        ...                   Precision.build("fp32", torch.device("cpu")), 1.0,
        ...                   torch.device("cpu"))
        >>> sums = MetricSums(torch.device("cpu"))
        >>> loss = stepper([(torch.ones(4, 2), torch.tensor([0, 1, 0, 1]))], sums)
        >>> loss.requires_grad, sorted(sums.means())
        (False, ['loss'])
    """

    net: nn.Module
    step_fn: StepFn
    optimizer: torch.optim.Optimizer
    precision: Precision
    grad_clip: float
    device: torch.device
    inspect: Callable[[Any], None] | None = None
    clock: StepClock | None = None
    eager: nn.Module | None = None
    on_compile_failure: Callable[[str], None] = print
    # model.channels_last: 4-D inputs in the memory format the model's weights are in.
    channels_last: bool = False
    params: list[torch.Tensor] = field(init=False)
    # Samples through this process so far (for samples/s).
    samples: int = field(init=False, default=0)
    # A step of one micro-batch can take plain_step (fp32 on the CPU, no clip, no scaler).
    plain: bool = field(init=False, default=False)
    # fp16: steps the GradScaler skipped, counted on the device (the loop's counter when a
    # Trainer runs this stepper, so that it is checkpointed).
    amp_skipped: torch.Tensor | None = None

    def __post_init__(self) -> None:
        # All of them: one unfrozen later is clipped too (clipping skips those without .grad).
        self.params = list(self.net.parameters())
        # A DataLoader yields CPU tensors: on the CPU there is nothing to move.
        self._move = self.device.type != "cpu" or self.channels_last
        # fp32 and one process: no context to enter per micro-batch (a hot path).
        self._fp32 = self.precision.dtype is None
        # fp32 on the CPU without clipping or a GradScaler: a step of one micro-batch takes
        # the straight path (plain_step). Every line of Python a step runs costs several
        # times its own time there, as it competes with torch's for the CPU's caches.
        self.plain = (self._fp32 and not self._move and self.precision.scaler is None
                      and self.grad_clip <= 0)  # fmt: skip
        if self.precision.scaler is not None and self.amp_skipped is None:
            self.amp_skipped = torch.zeros((), dtype=torch.int64, device=self.device)

    def __call__(
        self,
        micro_batches: Sequence[Any],
        sums: MetricSums | None = None,
        norms: MetricSums | None = None,
    ) -> torch.Tensor:
        """One optimizer step over ``micro_batches``; returns the mean loss (detached, on
        the device: reading it is the caller's choice of sync point). The step's metrics
        go into ``sums``; the gradient norm before clipping (computed to clip, so free)
        into ``norms`` as ``grad_norm``."""
        assert micro_batches, "an optimizer step needs at least one micro-batch"
        if self.eager is not None:
            return self._first_compiled_step(micro_batches, sums, norms)
        accum = len(micro_batches)
        if self.plain and accum == 1:
            return self.plain_step(micro_batches[0], sums)
        self.optimizer.zero_grad(set_to_none=True)
        if accum == 1:  # the usual: no loop, no sum
            total = self._micro_step(micro_batches[0], False, 1, sums, "compute")
        else:
            total = None
            for i, batch in enumerate(micro_batches):
                loss = self._micro_step(batch, i < accum - 1, accum, sums, "compute")
                total = loss if total is None else total + loss
        self._update(norms)
        assert total is not None
        return _mean(total, accum)

    def plain_step(self, batch: Any, sums: MetricSums | None) -> torch.Tensor:
        """:meth:`__call__`'s work for one fp32 micro-batch on the CPU, no clipping, no
        scaler (where :attr:`plain` is true, and no compiled first step is due): the same
        calls in the same order, in one frame."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.inspect is not None:
            self.inspect(batch)
        count = sample_count(batch)
        self.samples += count
        loss, metrics, n = unpack(self.step_fn(self.net, batch), count)
        loss.backward()
        detached = loss.detach()
        if sums is not None:
            if metrics["loss"] is loss:  # unpack's own dict: one detach for sums and caller
                metrics["loss"] = detached
            sums.add(metrics, n)
        if self.clock is not None:
            self.clock.mark("compute")
        self.optimizer.step()
        return detached if detached.dtype == torch.float32 else detached.float()

    def _micro_step(
        self, batch: Any, more: bool, accum: int, sums: MetricSums | None, phase: str
    ) -> torch.Tensor:
        """Forward and backward of one micro-batch; returns its loss, detached."""
        if self.inspect is not None:
            self.inspect(batch)
        clock = self.clock
        if self._move:
            batch = to_device(batch, self.device, self.channels_last)
            if clock is not None:
                clock.mark("copy")
        count = sample_count(batch)
        self.samples += count
        if more:
            # DDP all-reduces the gradients on the last micro-batch only.
            with no_sync(self.net, sync=False):
                loss, metrics, n = self._forward_backward(batch, count, accum)
        else:
            loss, metrics, n = self._forward_backward(batch, count, accum)
        raw, loss = loss, loss.detach()
        if sums is not None:
            if metrics["loss"] is raw:  # unpack's own dict: one detach for sums and caller
                metrics["loss"] = loss
            sums.add(metrics, n)
        if clock is not None:
            clock.mark(phase)
        return loss

    def _update(self, norms: MetricSums | None) -> None:
        """Unscale, clip, and the optimizer's step."""
        scaler = self.precision.scaler
        if scaler is not None:
            # Unscale first so that clipping sees the true gradient norm.
            scaler.unscale_(self.optimizer)
        if self.grad_clip > 0:
            norm = nn.utils.clip_grad_norm_(self.params, self.grad_clip)
            if hasattr(norm, "to_local"):  # FSDP: a DTensor, already the global norm
                norm = norm.to_local()
            if norms is not None:
                norms.add({"grad_norm": norm}, 1)
        if scaler is not None:
            scaler.step(self.optimizer)
            self._update_scale(scaler)
        else:
            self.optimizer.step()

    def _update_scale(self, scaler: torch.amp.GradScaler) -> None:
        """The scaler's update; a step it skipped (inf/NaN gradients) lowered the scale,
        which is how it is counted, on the device (no sync per step)."""
        scale = getattr(scaler, "_scale", None)
        before = scale.clone() if isinstance(scale, torch.Tensor) else None
        scaler.update()
        after = getattr(scaler, "_scale", None)
        if self.amp_skipped is not None and before is not None and after is not None:
            self.amp_skipped += (after < before).to(self.amp_skipped.dtype)

    def _first_compiled_step(
        self, micro_batches: Sequence[Any], sums: MetricSums | None, norms: MetricSums | None
    ) -> torch.Tensor:
        """The first step of a compiled model, where compilation happens; a model that does
        not compile trains eager, with one line saying why."""
        eager, self.eager = self.eager, None
        assert eager is not None, "only a compiled model's first step comes here"
        samples = self.samples
        # Micro-batches before the one that failed added their metrics: the eager retake
        # adds them again, so the sums go back to where they were.
        saved = sums.state_dict() if sums is not None else None
        self.optimizer.zero_grad(set_to_none=True)
        accum = len(micro_batches)
        try:
            losses = [
                self._micro_step(batch, i < accum - 1, accum, sums, "compile")
                for i, batch in enumerate(micro_batches)
            ]
        except Exception as exc:
            if not is_compile_error(exc):
                raise
            self.on_compile_failure(compile_failure_line(exc))
            self.net, self.samples = eager, samples
            if sums is not None and saved is not None:
                sums.load_state_dict(saved)
            # Nothing of this step was applied: the optimizer has not stepped.
            return self(micro_batches, sums, norms)
        self._update(norms)
        total = torch.stack(losses).sum()
        return _mean(total, accum)

    def inspect_epoch(self, check: Callable[[Any], None] | None, epoch: int) -> None:
        """Labels the data set could not show up front are checked in the first epoch:
        ``check`` inspects each batch of epoch 0, none after."""
        self.inspect = check if epoch == 0 else None

    def batches(
        self, data: TrainData, check: Callable[[Any], None] | None, who: str
    ) -> Iterator[Sequence[Any]]:
        """The micro-batches of each optimizer step, epoch after epoch in training's data
        order, with ``check`` (the label check) inspecting the first epoch's batches, as in
        training: the endless feed of lr-find and the profiler (``who`` names them)."""
        for epoch in itertools.count():
            self.inspect_epoch(check, epoch)
            empty = True
            for step in data.epoch(epoch):
                empty = False
                yield step
            if empty:  # an iterable that yields nothing would loop here forever
                raise UserError(f"{who}: the training data gave not one full optimizer step")

    def _forward_backward(self, batch: Any, count: int, accum: int) -> tuple:
        if self._fp32:
            out = self.step_fn(self.net, batch)
        else:
            with self.precision.autocast():
                out = self.step_fn(self.net, batch)
        loss, metrics, n = unpack(out, count)
        # Mean over the whole batch: each micro-batch adds 1/accum.
        scaled = loss / accum if accum > 1 else loss
        scaler = self.precision.scaler
        (scaler.scale(scaled) if scaler is not None else scaled).backward()
        return loss, metrics, n


def _mean(total: torch.Tensor, accum: int) -> torch.Tensor:
    """The step's loss: the micro-batches' summed losses over their number, in fp32."""
    if accum > 1:
        return total.float() / accum
    return total if total.dtype == torch.float32 else total.float()  # .float(): itself
