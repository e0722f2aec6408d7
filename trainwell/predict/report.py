"""Predictions gathered batch by batch: class labels (argmax over the class axis) or
values, and, when the data has targets, accuracy with a confusion matrix or MAE/RMSE."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainwell.export.files import staged

MAX_PRINTED = 20  # predictions printed; --out writes them all
MAX_MATRIX = 20  # classes in a printed confusion matrix; beyond, the top confusions


@dataclass
class Tally:
    """Per-sample predictions and targets, and the running sums of the metrics."""

    task: dict[str, Any]
    rows: list[np.ndarray] = field(default_factory=list)
    targets: list[np.ndarray] = field(default_factory=list)
    confusion: np.ndarray | None = None
    abs_err: float = 0.0
    sq_err: float = 0.0
    counted: int = 0

    @property
    def classification(self) -> bool:
        return self.task.get("kind") == "classification"

    def add(self, output: np.ndarray, labels: np.ndarray | None) -> None:
        """One batch: the first output of the model and, if known, the targets."""
        pred = output.argmax(axis=self.task["class_dim"]) if self.classification else output
        self.rows.extend(pred)
        if labels is None:
            return
        labels = np.asarray(labels)
        self.targets.extend(labels)
        if self.classification:
            self._count_classes(pred, labels)
        elif labels.shape == pred.shape:
            err = pred.astype(np.float64) - labels.astype(np.float64)
            self.abs_err += float(np.abs(err).sum())
            self.sq_err += float((err**2).sum())
            self.counted += err.size

    def _count_classes(self, pred: np.ndarray, labels: np.ndarray) -> None:
        n = int(self.task.get("num_classes") or 1 + max(int(pred.max()), int(labels.max())))
        valid = (labels >= 0) & (labels < n)  # negative targets (-100) are padding
        if self.confusion is None:
            self.confusion = np.zeros((n, n), dtype=np.int64)
        pairs = labels[valid].astype(np.int64) * n + pred[valid].astype(np.int64)
        self.confusion += np.bincount(pairs, minlength=n * n).reshape(n, n)

    @property
    def accuracy(self) -> float | None:
        """Share of targets predicted right (classification with targets)."""
        if self.confusion is None or not self.confusion.sum():
            return None
        return float(np.trace(self.confusion) / self.confusion.sum())

    def metric_lines(self) -> list[str]:
        if self.confusion is not None:
            right, total = int(np.trace(self.confusion)), int(self.confusion.sum())
            return [f"accuracy: {self.accuracy:.4f} ({right}/{total})", *self._matrix_lines()]
        if self.counted:
            mae, rmse = self.abs_err / self.counted, (self.sq_err / self.counted) ** 0.5
            return [f"mae: {mae:.6g}  rmse: {rmse:.6g}  ({self.counted} values)"]
        return []

    def _matrix_lines(self) -> list[str]:
        m = self.confusion
        assert m is not None
        if len(m) > MAX_MATRIX:
            off = [(int(m[i, j]), i, j) for i in range(len(m)) for j in range(len(m)) if i != j]
            top = sorted((c for c in off if c[0]), reverse=True)[:10]
            return [f"{len(m)} classes; most frequent confusions (label -> prediction: count):"] + [
                f"  {i} -> {j}: {c}" for c, i, j in top
            ]
        width = max(3, len(str(int(m.max()))) + 1)
        head = "label\\pred " + "".join(f"{j:>{width}}" for j in range(len(m)))
        body = [f"{i:>10} " + "".join(f"{v:>{width}}" for v in row) for i, row in enumerate(m)]
        return ["confusion matrix (rows: label, columns: prediction):", head, *body]

    def prediction_lines(self) -> list[str]:
        lines = ["index  prediction"]
        lines += [f"{i:>5}  {_text(r)}" for i, r in enumerate(self.rows[:MAX_PRINTED])]
        if len(self.rows) > MAX_PRINTED:
            lines.append(f"... {len(self.rows) - MAX_PRINTED} more (--out FILE writes them all)")
        return lines

    def write_csv(self, out: Path) -> None:
        """Every prediction (and target) as CSV, written whole or not at all."""
        with staged(out) as tmp, tmp.open("w") as f:
            f.write("index,prediction" + (",label\n" if self.targets else "\n"))
            for i, row in enumerate(self.rows):
                label = f",{_text(self.targets[i])}" if self.targets else ""
                f.write(f"{i},{_text(row)}{label}\n")


def _text(value: np.ndarray) -> str:
    # One value as itself; several (a token sequence, a vector) space-separated.
    flat = np.asarray(value).reshape(-1)
    return " ".join(f"{v:.6g}" if flat.dtype.kind == "f" else str(v) for v in flat.tolist())
