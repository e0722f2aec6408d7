"""Look at the data of a config before training: every split, and what is wrong with it.

The splits are the engine's own (:func:`trainwell.data.build_data`, without refusing bad
labels: here they are reported), batched by the engine's collate.

Example:
    >>> from trainwell.config import load_config
    >>> cfg = load_config(overrides=["data.name=synthetic", "data.kwargs.num_samples=200",
    ...                              "data.kwargs.shape=[4]", "data.kwargs.num_classes=3"])
    >>> report = inspect_data(cfg)
    >>> report.splits["train"].size, report.num_classes, report.classes_from
    (180, 3, 'the data set')
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from trainwell.config import Config
from trainwell.data import BUILTIN_DATA, DataSplits, build_collate, build_data
from trainwell.datacheck.checks import (
    batch_warning,
    field_warnings,
    overlap_warnings,
    shift_warnings,
)
from trainwell.datacheck.labels import label_warnings
from trainwell.datacheck.split import SplitReport, read_split
from trainwell.engine.loading.batch import collate_for
from trainwell.errors import UserError

MAX_SAMPLES = 10_000
SECONDS = 60.0


@dataclass
class DataReport:
    """Every split's report, the number of classes and where it came from, the warnings."""

    name: str
    splits: dict[str, SplitReport]
    num_classes: int | None
    classes_from: str | None
    max_samples: int
    warnings: list[str] = field(default_factory=list)
    grids: list[str] = field(default_factory=list)

    @property
    def classification(self) -> bool:
        """The training split's targets are one class per sample."""
        return self.splits["train"].classes is not None


def inspect_data(cfg: Config, max_samples: int = MAX_SAMPLES, seconds: float = SECONDS,
                 model_classes: int | None = None) -> DataReport:  # fmt: skip
    """Build the config's data as the engine does and inspect every split."""
    try:
        splits = build_data(cfg.data, check_targets=False)
    except UserError:
        raise
    except Exception as exc:  # the user's data set code failed: one line
        raise UserError(
            f"data.name: cannot build {cfg.data.name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    return inspect_splits(cfg, splits, max_samples, seconds, model_classes)


def inspect_splits(
    cfg: Config,
    splits: DataSplits,
    max_samples: int = MAX_SAMPLES,
    seconds: float = SECONDS,
    model_classes: int | None = None,
) -> DataReport:
    """Inspect splits already built (``trainwell train --dry-run`` passes its own)."""
    collate = build_collate(cfg.data.collate)
    if collate is None and not isinstance(splits.train, torch.utils.data.DataLoader):
        collate = collate_for(splits.sample)
    present = [(n, d) for n, d in (("train", splits.train), ("val", splits.val),
                                   ("test", splits.test)) if d is not None]  # fmt: skip
    start, reports = time.monotonic(), {}
    for k, (name, data) in enumerate(present):
        # The time left is shared among the splits still to read.
        left = seconds - (time.monotonic() - start)
        deadline = time.monotonic() + max(left, 0.0) / (len(present) - k)
        size = _batch_size(cfg) if name == "train" else cfg.data.eval_batch_size
        reports[name] = read_split(name, data, collate, size, max_samples, deadline)
    report = DataReport(cfg.data.name, reports, None, None, max_samples)
    report.num_classes, report.classes_from = _num_classes(cfg, splits, report, model_classes)
    report.warnings = _warnings(cfg, report)
    return report


def _batch_size(cfg: Config) -> int:
    # What one process takes per micro-step on one process.
    accum = cfg.train.grad_accum_steps
    return cfg.data.batch_size // accum if cfg.data.batch_size % accum == 0 else cfg.data.batch_size


def _num_classes(
    cfg: Config, splits: DataSplits, report: DataReport, model_classes: int | None
) -> tuple[int | None, str | None]:
    if not report.classification:
        return None, None
    if cfg.data.num_classes is not None:
        return cfg.data.num_classes, "data.num_classes"
    if model_classes is None:
        model_classes = _model_outputs(cfg, splits, report.splits["train"])
    if cfg.data.name in BUILTIN_DATA and splits.num_classes is not None:
        if model_classes is not None and model_classes != splits.num_classes:
            return model_classes, "the model's outputs"
        return splits.num_classes, "the data set"
    highest = [max(r.classes) for r in report.splits.values() if r.classes]
    inferred = max(highest) + 1 if highest else None
    if model_classes is not None and model_classes != inferred:
        return model_classes, "the model's outputs"
    return inferred, "the label range"


def _model_outputs(cfg: Config, splits: DataSplits, train: SplitReport) -> int | None:
    """The width of the model's output on the first batch, for the loss-built step.

    Best effort: a model that cannot be built or called here says nothing, as the data
    check is about the data; ``trainwell train --dry-run`` checks the model.
    """
    batch = train.first_batch
    if cfg.train.step or not isinstance(batch, (tuple, list)) or len(batch) != 2:
        return None
    from trainwell.models import build_model

    try:
        model = build_model(cfg.model, splits.num_classes, splits.input_shape or ())
        model.eval()
        with torch.no_grad():
            out = model(batch[0][:2])
    except Exception:  # noqa: BLE001 - see the docstring
        return None
    return int(out.shape[1]) if isinstance(out, torch.Tensor) and out.ndim == 2 else None


def _warnings(cfg: Config, report: DataReport) -> list[str]:
    out: list[str] = []
    counts = {n: dict(r.classes) for n, r in report.splits.items() if r.classes is not None}
    if counts:
        out += label_warnings(counts, report.num_classes, _ignore_index(cfg),
                              report.classes_from or "")  # fmt: skip
    for name, split in report.splits.items():
        for field_name, stats in split.inputs.items():
            out += field_warnings(name, field_name, stats, is_target=False)
        if split.targets is not None:
            out += field_warnings(name, split.target_name or "target", split.targets, True)
        out += batch_warning(split)
        if name != "train":
            out += shift_warnings(report.splits["train"], split)
            out += overlap_warnings(report.splits["train"], split)
    return out


def _ignore_index(cfg: Config) -> Any:
    default = -100 if cfg.train.loss == "cross_entropy" else None
    return cfg.train.loss_kwargs.get("ignore_index", default)
