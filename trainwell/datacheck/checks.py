"""Warnings about inputs and targets: NaN/Inf, constant inputs, unscaled inputs, splits
that are not normalized alike, batches that do not collate.

Example:
    >>> import torch
    >>> from trainwell.datacheck.stats import FieldStats
    >>> s = FieldStats()
    >>> s.add_batch(torch.tensor([[1.0], [float("nan")], [float("inf")], [2.0]]))
    >>> field_warnings("train", "input", s, is_target=False)
    ['train: 1 input contains NaN', 'train: 1 input contains Inf']
"""

from __future__ import annotations

from trainwell.datacheck.split import SplitReport
from trainwell.datacheck.stats import FieldStats

# Float inputs whose spread or centre is beyond this are not scaled for a network.
UNSCALED = 20.0
# Val/test means this many train standard deviations from train's: normalized differently.
SHIFT = 1.0


def field_warnings(split: str, name: str, stats: FieldStats, is_target: bool) -> list[str]:
    """NaN/Inf in a field, and float inputs that are constant or far from unit scale."""
    out = []
    what = name if name not in ("input", "target") else ("target" if is_target else "input")
    if stats.nan or stats.inf:
        for kind, count in (("NaN", stats.nan_samples), ("Inf", stats.inf_samples)):
            if count:
                out.append(f"{split}: {_holding(what, count, kind)}")
    d = stats.values.summary()
    if is_target or not stats.dtype.startswith(("float", "bfloat")) or d is None:
        return out
    if d.std == 0 and stats.values.n > 1:
        out.append(f"{split}: {what} is constant (every value {d.min:g}): nothing to learn from")
    elif d.std > UNSCALED or abs(d.mean) > UNSCALED:
        out.append(
            f"{split}: {what} is not scaled (mean {d.mean:.4g}, std {d.std:.4g}, "
            f"range [{d.min:.4g}, {d.max:.4g}]); standardize it (subtract the mean, "
            "divide by the std of train)"
        )
    return out


def _holding(what: str, count: int, kind: str) -> str:
    """``3 inputs contain NaN``, ``1 target contains Inf``, ``2 samples have NaN in y``."""
    if what in ("input", "target"):
        return f"{count} {what}{'s contain' if count > 1 else ' contains'} {kind}"
    return f"{count} sample{'s have' if count > 1 else ' has'} {kind} in {what}"


def shift_warnings(train: SplitReport, other: SplitReport) -> list[str]:
    """Inputs of val/test centred far from train's: normalized differently."""
    out = []
    for name, stats in other.inputs.items():
        base = train.inputs.get(name)
        if base is None or not stats.dtype.startswith("float"):
            continue
        a, b = base.values.summary(), stats.values.summary()
        if a is None or a.std == 0 or b is None:
            continue
        if abs(b.mean - a.mean) > SHIFT * a.std or b.std > 3 * a.std or (b.std < a.std / 3):
            what = "inputs" if name == "input" else name
            out.append(
                f"{other.name}: {what} have mean {b.mean:.3g} and std {b.std:.3g} but "
                f"train has {a.mean:.3g} and {a.std:.3g}: are they normalized the same way?"
            )
    return out


def overlap_warnings(train: SplitReport, other: SplitReport) -> list[str]:
    """Val/test samples whose inputs are also in train: the score would flatter the model."""
    if not train.digests or not other.digests:
        return []
    shared = sum(n for digest, n in other.digests.items() if digest in train.digests)
    if not shared:
        return []
    # Over the samples read: with a limit, there may be more.
    bound = "" if train.stopped is None and other.stopped is None else "at least "
    return [
        f"{other.name}: {bound}{shared} of {other.read} samples also appear in train "
        "(identical inputs): its scores would flatter the model"
    ]


def duplicate_count(report: SplitReport) -> int:
    """Samples read whose inputs repeat an earlier sample's of the same split."""
    return sum(n - 1 for n in report.digests.values())


def batch_warning(report: SplitReport) -> list[str]:
    """The split's samples that do not collate into a batch."""
    if report.batch_error is None:
        return []
    return [
        f"{report.name}: the samples do not collate into a batch ({report.batch_error}); "
        "give data.collate a function that pads them"
    ]
