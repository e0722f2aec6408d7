"""Early stopping and best-checkpoint tracking on one monitored metric."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from trainwell._options import check, check_choice, check_int, check_number, option


@dataclass
class EarlyStopConfig:
    """Which metric decides the best checkpoint, and when to stop early."""

    monitor: str = option(
        "auto",
        "metric as split/name, e.g. val/accuracy; auto: val/accuracy, else val/loss, else "
        "train/loss",
    )
    mode: str = option(
        "auto",
        "min, max, or auto: max for a metric object whose higher_is_better is true and for "
        "names of scores (accuracy, acc, f1, auroc, auc, ap, map, precision, recall, iou, "
        "dice, bleu, rouge, r2, score, ...), min otherwise",
    )
    patience: int = option(0, "stop after this many evaluations without improvement (0: never)")
    min_delta: float = option(0.0, "smallest change that counts as an improvement")

    def __post_init__(self) -> None:
        check_choice(self.mode, "early_stop.mode", ("auto", "min", "max"))
        check_int(self.patience, "early_stop.patience", low=0)
        check_number(self.min_delta, "early_stop.min_delta", low=0)
        check(
            self.monitor == "auto" or "/" in self.monitor,
            "early_stop.monitor",
            f"write split/name, e.g. val/accuracy; got {self.monitor!r}",
        )


class EarlyStopping:
    """Tracks the best value of a metric and counts evaluations without improvement.

    Example:
        >>> es = EarlyStopping("val/loss", "min", patience=2, min_delta=0.0)
        >>> [es.update(v) for v in (1.0, 0.5, 0.6, 0.7)], es.should_stop
        ([True, True, False, False], True)
    """

    def __init__(self, monitor: str, mode: str, patience: int, min_delta: float) -> None:
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.min_delta = min_delta
        self.best = math.inf if mode == "min" else -math.inf
        self.bad_evals = 0

    def update(self, value: float) -> bool:
        """Record one evaluation; True when it is a new best."""
        if self.mode == "min":
            improved = value < self.best - self.min_delta
        else:
            improved = value > self.best + self.min_delta
        if improved:
            self.best = value
            self.bad_evals = 0
        else:
            self.bad_evals += 1
        return improved

    @property
    def should_stop(self) -> bool:
        return self.patience > 0 and self.bad_evals >= self.patience

    def state_dict(self) -> dict:
        return {"best": self.best, "bad_evals": self.bad_evals, "monitor": self.monitor}

    def load_state_dict(self, state: dict) -> None:
        self.best = float(state["best"])
        self.bad_evals = int(state["bad_evals"])


def resolve_monitor(
    cfg: EarlyStopConfig,
    has_val: bool,
    has_accuracy: bool,
    higher_is_better: Mapping[str, bool] | None = None,
) -> tuple[str, str]:
    """The concrete (monitor, mode) that ``auto`` means for this run's data and task;
    ``higher_is_better`` is what metric objects say of themselves (``val/f1: True``)."""
    monitor = cfg.monitor
    if monitor == "auto":
        split = "val" if has_val else "train"
        monitor = f"{split}/accuracy" if has_val and has_accuracy else f"{split}/loss"
    mode = cfg.mode
    if mode == "auto":
        mode = auto_mode(monitor, higher_is_better or {})
    return monitor, mode


# Name parts of metrics where more is better (Lightning leaves the mode to the user; a
# wrong guess here would keep the worst checkpoint, so only unambiguous score names).
SCORE_WORDS = frozenset({
    "accuracy", "acc", "top1", "top5", "f1", "fbeta", "f1score", "auroc", "auc", "ap", "map",
    "precision", "recall", "iou", "miou", "jaccard", "dice", "bleu", "rouge", "meteor", "chrf",
    "r2", "score", "ndcg", "mrr", "hits", "kappa", "mcc", "sensitivity", "specificity",
})  # fmt: skip


def auto_mode(monitor: str, higher_is_better: Mapping[str, bool]) -> str:
    """``max`` for a score, ``min`` for a loss or an error.

    Example:
        >>> [auto_mode(m, {}) for m in ("val/accuracy", "val/macro_f1", "val/mape", "val/loss")]
        ['max', 'max', 'min', 'min']
        >>> auto_mode("val/count", {"val/count": True})
        'max'
    """
    said = higher_is_better.get(monitor)
    if said is not None:
        return "max" if said else "min"
    words = re.split(r"[/_.\-]+", monitor.partition("/")[2].lower())
    return "max" if any(w in SCORE_WORDS for w in words) else "min"
