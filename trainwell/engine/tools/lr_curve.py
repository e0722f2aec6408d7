"""The lr range test's curve: when to stop, and which lr to suggest.

**Stop.** The test stops on the first step where

- the loss is not finite (``"non-finite loss"``);
- the smoothed loss passes :data:`DIVERGE_FACTOR` (4) times its best (``"diverged"``,
  fastai's and Lightning's rule);
- or the loss has given back half of what it had fallen (``"loss rose back"``): the
  median of the last :data:`MEDIAN_OF` raw losses is above ``best + (start - best) / 2``
  (``best`` the smoothed loss's minimum, ``start`` the first steps' median), after a
  fall larger than the noise. This is the divergence of a
  classifier trained with gradient clipping and Adam: its loss does not explode, it
  returns to the majority-class level (about ln 2 for two classes), which is rarely four
  times the best, so the 4x rule alone never fires. The median keeps a spike (a
  single bad batch) from stopping the test, and does not lag as the average does.

**Suggest.** The lr where the loss falls fastest against log10(lr), looked for *only up
to the minimum of the smoothed loss* (and of a centred average, which does not lag):
past the minimum the curve is the divergence, whose noise and recoveries (a smoothed
loss falling back after a spike) give steep "falls" that are no advice at all. The
slope is a least-squares fit over a centred window of an eighth of the curve, on the
raw losses with their spikes taken out: the moving average lags, and its first
(bias-corrected) points are too noisy to differentiate. With too few points before the minimum,
the suggestion is a tenth of the minimum's lr (fastai's ``lr_min / 10``). A curve that
never falls by more than its noise (and at least :data:`MIN_FALL` of its level) gets no
suggestion. The suggestion is never above the lr of the minimum.

Example:
    >>> lrs = [10 ** (-5 + k / 10) for k in range(61)]              # 1e-5 .. 10
    >>> u = [1 - 0.8 * math.exp(-((math.log10(lr) + 2) ** 2)) + (lr > 0.1) * 2 for lr in lrs]
    >>> lowest = lrs[u.index(min(u))]                                  # 1e-2
    >>> f"{suggest_lr(lrs, u):.1e}", suggest_lr(lrs, u) < lowest
    ('2.0e-03', True)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

# Weight of the past in the loss average: about the last 50 steps count (fastai, Lightning).
SMOOTHING = 0.98
# Stop once the smoothed loss exceeds this multiple of its best so far (fastai, Lightning).
DIVERGE_FACTOR = 4.0
# Points left out of the suggestion at the start, while the average is still settling
# (Lightning's skip_begin); fewer on a short curve.
SKIP_START = 10
SKIP_END = 1
# A fall smaller than this share of the starting loss is no fall (a flat, noisy curve).
MIN_FALL = 0.05
# The fall must also exceed this many standard deviations of the smoothed loss's noise.
NOISE_SIGMAS = 6.0
# Raw losses whose median says the loss rose back (a spike or two do not move it).
MEDIAN_OF = 9
# The share of the fall the loss must give back to count as diverged.
GIVE_BACK = 0.5


def smooth(losses: Sequence[float], smoothing: float = SMOOTHING) -> list[float]:
    """The bias-corrected exponential moving average of ``losses`` (as Adam's moments).

    Example:
        >>> [round(v, 3) for v in smooth([1.0, 0.0], 0.5)]
        [1.0, 0.333]
    """
    average, out = 0.0, []
    for i, loss in enumerate(losses):
        average = smoothing * average + (1 - smoothing) * loss
        out.append(average / (1 - smoothing ** (i + 1)))
    return out


def stop_reason(losses: Sequence[float], smoothed: Sequence[float]) -> str | None:
    """Why the test stops after the last point of the curve so far, or ``None`` to go on.

    Example:
        >>> stop_reason([1.0, 0.9, float("nan")], [1.0, 0.95, float("nan")])
        'non-finite loss'
        >>> stop_reason([1.0, 0.5, 9.0], [1.0, 0.5, 5.0])
        'diverged'
    """
    last = smoothed[-1]
    if not (math.isfinite(last) and math.isfinite(losses[-1])):
        return "non-finite loss"
    if len(smoothed) < 2:
        return None
    if last > DIVERGE_FACTOR * min(smoothed[:-1]):
        return "diverged"
    if len(smoothed) <= 2 * SKIP_START:
        return None
    start = _start_level(losses)
    lowest = SKIP_START + int(np.argmin(smoothed[SKIP_START:-1]))
    best = smoothed[lowest]
    if not _significant(start - best, start, losses, lowest):
        return None
    back = best + GIVE_BACK * (start - best)
    # The raw losses' median: the smoothed loss lags the rise by tens of steps (while the
    # weights are being ruined), and one spike does not move a median.
    recent = statistics.median(losses[-MEDIAN_OF:])
    return "loss rose back" if recent > back and last > best else None


def suggest_lr(
    lrs: Sequence[float],
    smoothed: Sequence[float],
    skip_start: int = SKIP_START,
    skip_end: int = SKIP_END,
    losses: Sequence[float] | None = None,
) -> float | None:
    """The lr where ``smoothed`` falls fastest against log10(lr) before its minimum, or
    ``None`` if it never falls by more than its noise; ``losses`` (the raw ones) measure
    that noise.

    The first ``skip_start`` points are left out (at most a fifth of the curve), as are
    non-finite ones; ``skip_end`` is kept for callers and only matters when the curve's
    minimum is among its last points.

    Example:
        >>> lrs = [10 ** (-6 + k / 4) for k in range(25)]            # 1e-6 .. 1
        >>> curve = [2.0 / (1 + (lr / 1e-3) ** 2) + 0.1 for lr in lrs]  # falls around 1e-3
        >>> f"{suggest_lr(lrs, curve):.1e}"
        '1.0e-03'
    """
    keep = [i for i, s in enumerate(smoothed) if math.isfinite(s)]
    raw = [losses[i] for i in keep] if losses is not None else None
    if len(keep) < 3:
        return None
    begin = min(skip_start, len(keep) // 5)
    end = len(keep) - min(skip_end, len(keep) // 10)
    values = [smoothed[i] for i in keep]
    lowest = begin + int(np.argmin(values[begin:end]))
    start = _start_level(raw) if raw is not None else max(values[begin : lowest + 1])
    if not _significant(start - values[lowest], start, raw, lowest):
        return None
    x = np.log10([lrs[i] for i in keep])
    if raw is not None and all(math.isfinite(v) for v in raw):
        # The slope is read on the raw losses with their spikes (one bad batch) taken out,
        # not on the moving average: the average lags, its early (bias-corrected) points
        # are noisy, and a spike's slow decay in it is no fall of the loss.
        values = _despiked(raw)
    slope = _local_slopes(x, np.asarray(values, dtype=float), _width(len(keep)))
    # A centred fit has no lag: its own minimum may come before the average's.
    level = _local_means(np.asarray(values, dtype=float), _width(len(keep)))
    lowest = min(lowest, begin + int(np.argmin(level[begin:end])))
    # Up to the minimum: the fastest fall is before it, never past it.
    if lowest - begin < 3:
        return lrs[keep[lowest]] / 10  # fastai's lr_min / 10
    steepest = begin + int(np.argmin(slope[begin:lowest]))
    if slope[steepest] >= 0:
        return lrs[keep[lowest]] / 10
    return lrs[keep[steepest]]


def _width(n: int) -> int:
    """Points in each local fit: an eighth of the curve, at least 5, odd."""
    return max(5, n // 8) | 1


def _local_slopes(x: np.ndarray, y: np.ndarray, width: int) -> np.ndarray:
    """The least-squares slope of ``y`` against ``x`` over a window centred on each point
    (shorter at the ends): the derivative, with the noise of ``width`` points averaged."""
    half = width // 2
    out = np.empty(len(y))
    for i in range(len(y)):
        xs, ys = x[max(0, i - half) : i + half + 1], y[max(0, i - half) : i + half + 1]
        dx = xs - xs.mean()
        var = float((dx * dx).sum())
        out[i] = float((dx * (ys - ys.mean())).sum()) / var if var > 0 else 0.0
    return out


def _local_means(y: np.ndarray, width: int) -> np.ndarray:
    half = width // 2
    return np.array([y[max(0, i - half) : i + half + 1].mean() for i in range(len(y))])


def _despiked(losses: Sequence[float], width: int = MEDIAN_OF) -> list[float]:
    """``losses`` with each value far above the median of its neighbours (more than
    :data:`NOISE_SIGMAS` noise deviations) replaced by that median."""
    raw = np.asarray(losses, dtype=float)
    half = width // 2
    medians = np.array([np.median(raw[max(0, i - half) : i + half + 1]) for i in range(raw.size)])
    sigma = _noise(raw)
    return list(np.where(raw > medians + NOISE_SIGMAS * sigma, medians, raw))


def _noise(raw: np.ndarray) -> float:
    """The raw loss's noise from step-to-step differences (the trend barely moves them),
    by the median absolute deviation (spikes do not count)."""
    steps = np.diff(raw[np.isfinite(raw)])
    if steps.size < 2:
        return 0.0
    return 1.4826 * float(np.median(np.abs(steps - np.median(steps)))) / math.sqrt(2)


def _start_level(losses: Sequence[float]) -> float:
    """Where the curve started: the median raw loss of the first steps (the start of the
    range trains next to nothing, so this is the untrained model's loss)."""
    head = [v for v in losses[: max(SKIP_START, 3)] if math.isfinite(v)]
    return float(statistics.median(head)) if head else math.inf


def _significant(fall: float, start: float, losses: Sequence[float] | None, at: int) -> bool:
    """A fall bigger than :data:`MIN_FALL` of the start and than the noise of the smoothed
    loss at point ``at`` (and of the start level)."""
    if not fall > MIN_FALL * abs(start):
        return False
    if losses is None or len(losses) < 3:
        return True
    noise = _noise(np.asarray(losses, dtype=float))
    noise *= math.hypot(_ema_share(at), 1 / math.sqrt(max(SKIP_START, 3)))
    return fall > NOISE_SIGMAS * noise


def _ema_share(i: int, beta: float = SMOOTHING) -> float:
    """The share of white noise's standard deviation left in the bias-corrected moving
    average at step ``i`` (large at first, sqrt((1 - b) / (1 + b)) in the long run)."""
    n = i + 1
    var = (1 - beta) ** 2 * (1 - beta ** (2 * n)) / ((1 - beta**2) * (1 - beta**n) ** 2)
    return math.sqrt(var)
