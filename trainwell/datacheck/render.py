"""The data report as text, as JSON, and as the one line ``trainwell train --dry-run`` prints.

Example:
    >>> from trainwell.config import load_config
    >>> from trainwell.datacheck.report import inspect_data
    >>> cfg = load_config(overrides=["data.name=synthetic", "data.kwargs.num_samples=100",
    ...                              "data.kwargs.shape=[4]", "data.kwargs.num_classes=2"])
    >>> summary_line(inspect_data(cfg)).split(";")[0]
    'data: train 90 / val 10, 2 classes, imbalanced (largest/smallest 1.7x)'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from trainwell.datacheck.checks import duplicate_count
from trainwell.datacheck.labels import balance, json_counts, majority
from trainwell.datacheck.report import DataReport
from trainwell.datacheck.split import SplitReport
from trainwell.datacheck.stats import FieldStats
from trainwell.engine.loading.batch import describe, sample_count

# Label counts shown per line of text, and classes shown at most.
PER_LINE = 10
MAX_CLASSES_SHOWN = 50


def to_json(report: DataReport) -> dict[str, Any]:
    """``{"splits": {"train": {"size", "label_counts", "inputs", "first_batch", ...}},
    "warnings": [...]}`` and the number of classes, the sampling, the grids."""
    return {
        "data": report.name,
        "num_classes": report.num_classes,
        "classes_from": report.classes_from,
        "max_samples": report.max_samples,
        "splits": {name: _split_json(s, report.num_classes) for name, s in report.splits.items()},
        "warnings": list(report.warnings),
        "grids": list(report.grids),
    }


def _split_json(s: SplitReport, num_classes: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"size": s.size, "read": s.read, "stopped": s.stopped,
                           "duplicates": duplicate_count(s)}  # fmt: skip
    out["label_counts"] = json_counts(dict(s.classes)) if s.classes is not None else None
    if s.classes is not None:
        top = majority(dict(s.classes))
        out["labels"] = {
            "counted_over": "all" if s.labels_complete else "read",
            "distinct": len(s.classes),
            "majority_class": top[0] if top else None,
            "majority_share": top[1] if top else None,
            "balance": balance(dict(s.classes)),
            "missing": [k for k in range(num_classes or 0) if k not in s.classes],
        }
    main = s.main_input
    out["inputs"] = {**(s.inputs[main].to_dict() if main else {}), "name": main,
                     "fields": {n: f.to_dict() for n, f in s.inputs.items()}}  # fmt: skip
    out["targets"] = s.targets.to_dict() if s.targets is not None else None
    out["first_batch"] = _batch_json(s)
    return out


def _batch_json(s: SplitReport) -> dict[str, Any]:
    if s.batch_error is not None:
        return {"error": s.batch_error}
    tensors: dict[str, Any] = {}
    _walk(s.first_batch, "", tensors)
    return {"describe": describe(s.first_batch), "size": sample_count(s.first_batch),
            "tensors": tensors}  # fmt: skip


def _walk(batch: Any, path: str, into: dict[str, Any], depth: int = 0) -> None:
    if isinstance(batch, torch.Tensor):
        into[path or "batch"] = {"shape": list(batch.shape),
                                 "dtype": str(batch.dtype).removeprefix("torch.")}  # fmt: skip
        return
    if depth > 4:
        return
    if isinstance(batch, dict):
        items: Any = batch.items()
    elif isinstance(batch, (list, tuple)):
        items = enumerate(batch)
    else:
        return
    for key, value in items:
        _walk(value, f"{path}.{key}" if path else str(key), into, depth + 1)


def render(report: DataReport, say: Callable[[str], object] = print) -> None:
    """The report as text, one block per split, then the warnings."""
    read = [s for s in report.splits.values() if s.stopped]
    scope = "every sample" if not read else f"at most {report.max_samples} samples per split"
    n = len(report.splits)
    say(f"data {report.name}: {n} split{'s' if n > 1 else ''}; statistics over {scope}")
    if report.num_classes is not None:
        say(f"  classes      {report.num_classes} (from {report.classes_from})")
    for split in report.splits.values():
        _render_split(split, report.num_classes, say)
    if report.warnings:
        say(f"warnings ({len(report.warnings)}):")
        for line in report.warnings:
            say(f"  - {line}")
    else:
        say("no warnings")


def _render_split(s: SplitReport, num_classes: int | None, say: Callable[[str], object]) -> None:
    size = "unknown size (iterable)" if s.size is None else f"{s.size} samples"
    note = {
        "limit": f"; statistics over {s.read} drawn evenly",
        "time": f"; time limit reached: statistics over the first {s.read}",
    }.get(s.stopped or "", "")
    say(f"{s.name:<6} {size}{note}")
    if s.classes is not None:
        counts = dict(s.classes)
        top = majority(counts)
        of = f" of {num_classes}" if num_classes is not None else ""
        head = f"{len(counts)}{of} classes, {balance(counts)}"
        if top:
            head += f"; most common class {top[0]} ({top[1]:.1%})"
        say(f"  labels       {head}{'' if s.labels_complete else ' (over the samples read)'}")
        items = sorted(counts.items())[:MAX_CLASSES_SHOWN]
        for i in range(0, len(items), PER_LINE):
            say("               " + "  ".join(f"{k}: {v}" for k, v in items[i : i + PER_LINE]))
    for name, stats in s.inputs.items():
        say(f"  {name:<12} {_stats_text(stats)}")
        if stats.channels is not None and len(stats.channels) > 1:
            for c, m in enumerate(stats.channels):
                d = m.to_dict()
                say(f"    channel {c}  mean {_g(d['mean'])}  std {_g(d['std'])}  "
                    f"[{_g(d['min'])}, {_g(d['max'])}]")  # fmt: skip
    if s.targets is not None:
        say(f"  {(s.target_name or 'target'):<12} {_stats_text(s.targets)}")
    batch = s.batch_error and f"does not collate: {s.batch_error}" or describe(s.first_batch)
    say(f"  first batch  {batch}")


def _stats_text(stats: FieldStats) -> str:
    d = stats.to_dict()
    shape = tuple(d["shape"]) if d["shape"] is not None else f"{d['shapes']} shapes"
    text = f"{shape} {d['dtype']}  mean {_g(d['mean'])}  std {_g(d['std'])}  " \
           f"[{_g(d['min'])}, {_g(d['max'])}]"  # fmt: skip
    if d["nan"] or d["inf"]:
        text += f"  NaN {d['nan']}  Inf {d['inf']} (in {d['nonfinite_samples']} samples)"
    if "lengths" in d:
        lengths = d["lengths"]
        text += (
            f"  lengths {lengths['min']}/{_g(lengths['median'])}/{lengths['max']} (min/median/max)"
        )
    return text


def _g(value: float | None) -> str:
    if value is None:
        return "-"
    # A standardized mean comes out as 1e-08: it is zero to the digits shown.
    return "0" if abs(value) < 1e-6 else f"{value:.4g}"


def summary_line(report: DataReport) -> str:
    """One line: sizes, classes and balance (or targets), the main input's shape and range."""
    sizes = " / ".join(f"{n} {'?' if s.size is None else s.size}" for n, s in report.splits.items())
    train = report.splits["train"]
    parts = [f"data: {sizes}"]
    if train.classes is not None:
        shape = balance(dict(train.classes))
        parts.append(f"{report.num_classes} classes, {shape}")
    elif train.targets is not None:
        d = train.targets.values.to_dict()
        parts.append(f"targets in [{_g(d['min'])}, {_g(d['max'])}]")
    line = ", ".join(parts)
    main = train.main_input
    if main is not None:
        line += "; " + _input_text(train.inputs[main])
    if report.warnings:
        extra = len(report.warnings) - 1
        more = f" (+{extra} more: trainwell data)" if extra else ""
        line += f"; warning: {report.warnings[0]}{more}"
    return line


def _input_text(stats: FieldStats) -> str:
    d = stats.to_dict()
    if d["shape"] is None:
        what = f"inputs of {d['shapes']} shapes"
        if "lengths" in d:
            what = f"inputs of length {d['lengths']['min']}..{d['lengths']['max']}"
    else:
        n = 1
        for dim in d["shape"]:
            n *= dim
        shape = tuple(d["shape"])
        what = f"inputs {shape} = {n} {d['dtype']}" if len(shape) > 1 else ""
        what = what or f"inputs {n} {d['dtype']}"
    return f"{what} in [{_g(d['min'])}, {_g(d['max'])}]"
