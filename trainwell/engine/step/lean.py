"""Lean steps: runs of optimizer steps in one frame, until the loop has work at a step.

Where the Trainer's steps are lean (one fp32 micro-batch on the CPU, no clipping, one
process, nothing called per step: ``Trainer._lean``), its ``after_step`` runs only at the
steps where it has work, and the steps between run here: :func:`plain_steps` calls
:meth:`Stepper.plain_step <trainwell.engine.step.stepper.Stepper.plain_step>` per step;
:func:`loss_steps` inlines the step itself where it is a loss's (``fit(loss_fn=...)``).

Where the step is the engine's own :class:`~trainwell.engine.step.step_fn.LossStep`,
:func:`loss_steps` makes, per step, the very torch calls of :meth:`Stepper.plain_step
<trainwell.engine.step.stepper.Stepper.plain_step>` in the same order: ``zero_grad``,
``loss_fn(model(input), target)``, ``backward``, ``detach``, ``optimizer.step()``. What it
leaves out is Python: the calls of the step function, ``unpack``, ``MetricSums.add`` and
three ``StepClock.mark`` per step. Its clock readings are the marks' own (data, compute,
optim), added to the clock once, at the end (:meth:`StepClock.record
<trainwell.engine.step.anatomy.StepClock.record>`).

Why a second path: on a tiny model on the CPU (the digits MLP, about 0.6 ms a step) every
Python call a step makes costs several times its own time, as it competes with torch's
code for the CPU's caches. Measured in one process on trainwell's own objects, on cached
batches, 25 interleaved rounds: 345-346 us a step inlined, 356-361 us through
``plain_step``, 330-343 us for the hand-written body (``benchmarks/overhead.py`` for
whole runs). ``tests/unit/engine/test_lean_steps.py`` and ``test_loss_steps.py`` hold
both paths to the same losses, weights, counters, checkpoints and errors.

Example:
    >>> from types import SimpleNamespace
    >>> import torch
    >>> from torch import nn
    >>> from trainwell.engine.state.metrics import MetricSums
    >>> from trainwell.engine.step.anatomy import StepClock
    >>> from trainwell.engine.step.precision import Precision
    >>> from trainwell.engine.step.step_fn import LossStep
    >>> from trainwell.engine.step.stepper import Stepper
    >>> net = nn.Linear(2, 2)
    >>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
    >>> cpu = torch.device("cpu")
    >>> stepper = Stepper(net, LossStep(nn.CrossEntropyLoss()), opt,
    ...                   Precision.build("fp32", cpu), 0.0, cpu, clock=StepClock(cpu))
    >>> fusable(stepper)
    True
    >>> batches = zip([(torch.ones(4, 2), torch.tensor([0, 1, 0, 1]))] * 3)
    >>> loop = SimpleNamespace(step=0, window=MetricSums(cpu))
    >>> loss_steps(stepper, batches, loop, 10, SimpleNamespace(signum=None))  # ran out
    True
    >>> loop.step, stepper.samples, sorted(loop.window.means())
    (3, 12, ['loss'])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

import torch

from trainwell.engine.loading.batch import sample_count
from trainwell.engine.step.step_fn import LossStep, unpack

if TYPE_CHECKING:
    from trainwell.engine.state.metrics import MetricSums
    from trainwell.engine.step.stepper import Stepper

Steps = Iterator[Sequence[Any]]  # the micro-batches of each step: 1-tuples here


class LoopCounters(Protocol):
    """The loop's state as these steps see it (``LoopState``): the optimizer steps taken
    and the log window's running sums."""

    step: int
    window: MetricSums


class StopFlag(Protocol):
    """A pending signal's number, or ``None``."""

    signum: int | None


def fusable(stepper: Stepper) -> bool:
    """``stepper``'s one-micro-batch steps can run as :func:`loss_steps`: it takes
    :meth:`~trainwell.engine.step.stepper.Stepper.plain_step`, its step is the engine's
    LossStep (a subclass may do more), without accuracy, and it marks a clock."""
    step = stepper.step_fn
    return (stepper.plain and stepper.eager is None and type(step) is LossStep
            and not step.accuracy and stepper.clock is not None)  # fmt: skip


def loss_steps(stepper: Stepper, steps: Steps, loop: LoopCounters, until: int, stop: StopFlag
               ) -> bool:  # fmt: skip
    """One step per 1-tuple ``(batch,)`` of ``steps``, each ``loop.step += 1``, its loss
    noted in ``loop.window``, until ``loop.step`` reaches ``until`` or a signal is pending after a
    step (returns ``False``: the caller has work at this step) or ``steps`` runs out
    (returns ``True``). The clock and ``stepper.samples`` are brought up to date however
    it ends, an exception included. Only where :func:`fusable`."""
    assert isinstance(stepper.step_fn, LossStep) and stepper.clock is not None
    net, loss_fn, inspect = stepper.net, stepper.step_fn.loss_fn, stepper.inspect
    pair = LossStep.pair
    zero_grad, update = stepper.optimizer.zero_grad, stepper.optimizer.step
    sums = loop.window
    values, counts = sums.pending_of("loss")
    fold_at = sums.FOLD_EVERY
    clock = stepper.clock
    data = compute = optim = 0.0
    last = clock.since
    taken = samples = 0
    try:
        for (batch,) in steps:
            now = perf_counter()
            data += now - last  # waiting for this batch, since the last step ended
            zero_grad(set_to_none=True)
            if inspect is not None:  # the label check, in the first epoch
                inspect(batch)
            count = sample_count(batch)
            inputs, targets = pair(batch)
            loss = loss_fn(net(inputs), targets)
            if not isinstance(loss, torch.Tensor) or loss.dim() or not loss.is_floating_point():
                unpack(loss, count)  # raises the StepError the other path raises
            loss.backward()
            values.append(loss.detach())
            counts.append(count)
            if len(values) >= fold_at:
                sums.fold("loss")
                values, counts = sums.pending_of("loss")
            last = perf_counter()
            compute += last - now
            update()
            loop.step += 1
            now = perf_counter()
            optim += now - last
            last, taken, samples = now, taken + 1, samples + count
            if loop.step >= until or stop.signum is not None:
                return False
        return True
    finally:
        clock.record(data, compute, optim, taken, last)
        stepper.samples += samples


def plain_steps(stepper: Stepper, steps: Steps, loop: LoopCounters, until: int, stop: StopFlag,
                per_step: Callable[[], None] | None) -> bool:  # fmt: skip
    """As :func:`loss_steps`, for any step :meth:`Stepper.plain_step
    <trainwell.engine.step.stepper.Stepper.plain_step>` takes; ``per_step`` (the
    scheduler's step) after each optimizer step."""
    clock = stepper.clock
    assert clock is not None
    for (batch,) in steps:
        clock.mark("data")
        stepper.plain_step(batch, loop.window)
        if per_step is not None:
            per_step()
        loop.step += 1
        clock.mark("optim", ends_step=True)
        if loop.step >= until or stop.signum is not None:
            return False
    return True
