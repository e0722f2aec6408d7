"""``trainwell batch-size``: the batch size for this device, as Lightning's
``scale_batch_size`` finds it, measured with the run's own step.

The run is built as ``trainwell train`` builds it (model, data, loss, optimizer, precision,
accumulation: :func:`~trainwell.engine.build.parts.build_parts` and the
:class:`~trainwell.engine.step.stepper.Stepper`), and each batch size tried takes a warm-up step
then a few timed optimizer steps on real batches.

- On CUDA the question is what fits: the batch doubles until a step runs out of memory,
  then a binary search between the last size that fitted and the first that did not
  (Lightning's ``power`` then ``binsearch``). The answer is the largest that fitted.
- On the CPU (and MPS) memory is rarely the limit and bigger is not always faster: the
  sizes double while the samples per second still rise; the answer is the smallest size
  within 3% of the fastest (a smaller batch of the same speed takes more optimizer steps
  per epoch, which usually trains better).

Nothing of the trained weights is kept and ``run.dir`` is never touched. A batch size
changes what the learning rate should be: the result says so (the linear scaling rule, or
``trainwell lr-find`` at the new size).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from trainwell.config import Config
from trainwell.errors import UserError

if TYPE_CHECKING:
    from trainwell.engine.distributed.placement import Placement

# On the CPU: a size within this share of the fastest counts as as fast.
_AS_FAST = 0.97
# On the CPU: stop doubling once a size is this much slower than the best so far.
_PAST_PEAK = 0.9
# Each size is timed over at least this long (within _MAX_STEPS steps): a few milliseconds
# of steps on a busy machine say more about the machine than about the batch size.
_MIN_SECONDS = 0.5
_MAX_STEPS = 50


@dataclass
class Trial:
    """One batch size tried: ``fits`` (False: out of memory), samples/s, peak memory."""

    batch_size: int
    fits: bool
    samples_per_s: float | None = None
    peak_mb: float | None = None


@dataclass
class BatchSizeResult:
    """What :func:`find_batch_size` found: the ``best`` size, why, and every trial."""

    best: int
    reason: str
    device: str
    configured: int
    trials: list[Trial] = field(default_factory=list)

    def trial(self, batch_size: int) -> Trial | None:
        return next((t for t in self.trials if t.batch_size == batch_size), None)


class Trier(Protocol):
    """What the searches need of the thing that tries a batch size: called with a size,
    it returns (and appends to ``trials``) the :class:`Trial`. The command's runs real
    optimizer steps; a test's fake decides by a memory limit."""

    cfg: Config
    place: Placement
    accum: int
    trials: list[Trial]

    def __call__(self, batch_size: int) -> Trial: ...


def find_batch_size(
    cfg: Config, *, max_batch: int = 4096, steps: int = 3, say: Any = print
) -> BatchSizeResult:
    """Try batch sizes of the config's run on its device; see the module's docstring.

    Example:
        >>> from trainwell.config import load_config
        >>> cfg = load_config(overrides=["data.name=synthetic", "model.name=mlp"])
        >>> result = find_batch_size(cfg, max_batch=64, steps=1)  # doctest: +SKIP
        >>> result.best in (8, 16, 32, 64)  # doctest: +SKIP
        True
    """
    from trainwell.engine.build.parts import build_parts
    from trainwell.engine.distributed.placement import Placement, resolve_device

    if steps < 1 or max_batch < 1:
        raise UserError(f"batch-size: --steps and --max must be at least 1; got {steps}, "
                        f"{max_batch}")  # fmt: skip
    place = Placement(device=resolve_device(cfg.run.device))
    parts = build_parts(cfg, place)
    size = _train_size(parts.splits.train)
    limit = min(max_batch, size) if size else max_batch
    trier = _Trier(cfg, place, parts, steps, say)
    if place.device.type == "cuda":
        return largest_that_fits(trier, limit)
    return _fastest(trier, limit)


def _train_size(data: Any) -> int | None:
    try:
        return len(data)
    except TypeError:
        return None  # an IterableDataset: no bound but --max


class _Trier:
    """Runs ``steps`` timed optimizer steps (after one warm-up) at a batch size."""

    def __init__(self, cfg: Config, place: Placement, parts: Any, steps: int, say: Any) -> None:
        from trainwell.engine.build.optim import build_optimizer
        from trainwell.engine.step.precision import Precision, resolve_precision

        self.cfg, self.place, self.parts, self.steps, self.say = cfg, place, parts, steps, say
        self.accum = cfg.train.grad_accum_steps
        self.optimizer = build_optimizer(cfg.optim, parts.model)
        name = resolve_precision(cfg.train.precision, place.device)
        self.precision = Precision.build(name, place.device)
        self.trials: list[Trial] = []

    def __call__(self, batch_size: int) -> Trial:
        trial = self._run(batch_size)
        self.trials.append(trial)
        if trial.fits:
            peak = f", peak {trial.peak_mb:.0f} MB" if trial.peak_mb is not None else ""
            self.say(f"batch {batch_size:>6}: {trial.samples_per_s:,.0f} samples/s{peak}")
        else:
            self.say(f"batch {batch_size:>6}: out of memory")
        return trial

    def _run(self, batch_size: int) -> Trial:
        from trainwell.engine.loading.loaders import TrainData
        from trainwell.engine.step.stepper import Stepper

        settings = dataclasses.replace(self.parts.loaders, batch_size=batch_size)
        data = TrainData.build(self.parts.splits.train, settings, self.place)
        stepper = Stepper(self.parts.model, self.parts.steps.train, self.optimizer,
                          self.precision, self.cfg.train.grad_clip, self.place.device)  # fmt: skip
        self.parts.model.train()
        cuda = self.place.device.type == "cuda"
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.place.device)
        feed = stepper.batches(data, None, "batch-size")
        try:
            stepper(next(feed))  # warm-up: allocations, kernels, the optimizer's state
            _sync(self.place.device)
            began, done = time.perf_counter(), 0
            # At least `steps`, and on until the timing is long enough to mean something.
            while done < self.steps or (time.perf_counter() - began < _MIN_SECONDS
                                        and done < _MAX_STEPS):  # fmt: skip
                stepper(next(feed)).item()  # .item(): the step is done, on any device
                done += 1
            seconds = time.perf_counter() - began
        except torch.OutOfMemoryError:
            self.optimizer.zero_grad(set_to_none=True)
            return Trial(batch_size, fits=False)
        peak = torch.cuda.max_memory_allocated(self.place.device) / 2**20 if cuda else None
        return Trial(batch_size, True, batch_size * done / max(seconds, 1e-9), peak)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sizes(start: int, limit: int, multiple: int) -> list[int]:
    """Powers of two from ``start`` up to ``limit`` that split into ``multiple`` parts.

    Example:
        >>> _sizes(8, 100, 1), _sizes(1, 20, 4)
        ([8, 16, 32, 64], [4, 8, 16])
    """
    sizes, b = [], 1
    while b <= limit:
        if b >= start and b % multiple == 0:
            sizes.append(b)
        b *= 2
    return sizes


def _fastest(trier: Trier, limit: int) -> BatchSizeResult:
    best: Trial | None = None
    slower = 0
    for b in _sizes(8, limit, trier.accum) or [trier.accum]:
        trial = trier(b)
        if not trial.fits:
            break
        assert trial.samples_per_s is not None
        if best is None or trial.samples_per_s > (best.samples_per_s or 0):
            best, slower = trial, 0
        elif trial.samples_per_s < _PAST_PEAK * (best.samples_per_s or 0):
            slower += 1
            if slower == 2:
                break  # two sizes in a row past the peak: bigger will not come back
    if best is None:
        raise UserError("batch-size: not even the smallest batch size could train")
    top = best.samples_per_s or 0
    chosen = min(t.batch_size for t in trier.trials if t.fits and
                 (t.samples_per_s or 0) >= _AS_FAST * top)  # fmt: skip
    reason = (f"the smallest batch within {round(100 * (1 - _AS_FAST))}% of the fastest "
              f"({best.batch_size}: {top:,.0f} samples/s) on {trier.place.device}")  # fmt: skip
    return _result(trier, chosen, reason)


def largest_that_fits(trier: Trier, limit: int) -> BatchSizeResult:
    """The largest batch size up to ``limit`` that fits (CUDA's search): doubling from the
    configured size until one does not fit, then a binary search to within 1/16.

    Example:
        >>> from types import SimpleNamespace
        >>> class UpTo100:  # a device on which at most 100 samples fit
        ...     cfg = SimpleNamespace(data=SimpleNamespace(batch_size=32))
        ...     place, accum, trials = SimpleNamespace(device="cuda:0"), 1, []
        ...     def __call__(self, batch_size):
        ...         self.trials.append(Trial(batch_size, fits=batch_size <= 100))
        ...         return self.trials[-1]
        >>> result = largest_that_fits(UpTo100(), 4096)
        >>> result.best, [t.batch_size for t in result.trials]
        (100, [32, 64, 128, 96, 112, 104, 100])
    """
    start = max(trier.accum, min(trier.cfg.data.batch_size, limit))
    good, bad = 0, None
    b = start
    while b <= limit:  # double until it does not fit (Lightning's "power" mode)
        if not trier(b).fits:
            bad = b
            break
        good, b = b, b * 2
    if good == 0:  # the configured size itself did not fit: halve down
        b = start // 2
        while b >= trier.accum and not trier(b).fits:
            b //= 2
        good = b if b >= trier.accum else 0
    if not good:
        raise UserError("batch-size: not even a batch of "
                        f"{trier.accum} fits on {trier.place.device}")  # fmt: skip
    while bad is not None and bad - good > max(trier.accum, good // 16):  # binary search
        mid = (good + bad) // 2 // trier.accum * trier.accum
        if mid in (good, bad):
            break
        good, bad = (mid, bad) if trier(mid).fits else (good, mid)
    capped = "" if bad is not None else f" (capped at {limit}: --max or the data's size)"
    return _result(trier, good, f"the largest batch that fits on {trier.place.device}{capped}")


def _result(trier: Trier, best: int, reason: str) -> BatchSizeResult:
    return BatchSizeResult(best=best, reason=reason, device=str(trier.place.device),
                           configured=trier.cfg.data.batch_size, trials=trier.trials)  # fmt: skip


def lr_note(result: BatchSizeResult, lr: float) -> str:
    """The learning rate's side of a new batch size: the linear scaling rule's value.

    Example:
        >>> r = BatchSizeResult(best=256, reason="", device="cpu", configured=32)
        >>> lr_note(r, 0.001).split("; ")[1].split(" (")[0]
        'at 256 the linear scaling rule gives optim.lr=0.008'
    """
    if result.best == result.configured:
        return f"the configured batch size {result.configured} is already the one found"
    scaled = lr * result.best / result.configured
    return (f"optim.lr={lr:g} was set for batch {result.configured}; at {result.best} the "
            f"linear scaling rule gives optim.lr={float(f'{scaled:.3g}'):g} (or run trainwell "
            f"lr-find data.batch_size={result.best})")  # fmt: skip


__all__ = ["BatchSizeResult", "Trial", "Trier", "find_batch_size", "largest_that_fits", "lr_note"]
