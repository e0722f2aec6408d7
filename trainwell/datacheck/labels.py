"""Class labels across splits: counts, classes that never appear, gaps, imbalance.

Every check names the split and says in plain words what is wrong, e.g.
``val: class 7 never appears (train has 120)`` or ``train: 62% of samples are class 0``.

Example:
    >>> counts = {"train": {0: 90, 1: 10}, "val": {0: 10}}
    >>> for line in label_warnings(counts, num_classes=2):
    ...     print(line)
    train: 90% of samples are class 0
    val: 100% of samples are class 0
    val: class 1 never appears (train has 10)
"""

from __future__ import annotations

from typing import Any

import torch

# The largest class over the smallest: beyond this a class is too rare to learn well.
RARE_RATIO = 10.0
# At most this ratio between the largest and the smallest class reads as "balanced".
BALANCED_RATIO = 1.5
# The majority share warned about, at least (with many classes 1/C + ... is small).
MAJORITY_FLOOR = 0.4
# Long lists of classes are cut in messages.
SHOWN = 8


def count_labels(targets: torch.Tensor) -> dict[int, int]:
    """``{class: count}``, sorted by class."""
    values, counts = torch.unique(targets.flatten().long(), return_counts=True)
    return {int(v): int(c) for v, c in zip(values.tolist(), counts.tolist())}


def majority(counts: dict[int, int]) -> tuple[int, float] | None:
    """``(class, share)`` of the most common class; ``None`` without labels."""
    total = sum(counts.values())
    if not total:
        return None
    top = max(counts, key=lambda k: (counts[k], -k))
    return top, counts[top] / total


def balance(counts: dict[int, int]) -> str:
    """``balanced`` or ``imbalanced (largest/smallest 8.0x)``, over the classes present."""
    present = [c for c in counts.values() if c]
    if not present:
        return "no labels"
    ratio = max(present) / min(present)
    return "balanced" if ratio <= BALANCED_RATIO else f"imbalanced (largest/smallest {ratio:.1f}x)"


def label_warnings(
    counts: dict[str, dict[int, int]],
    num_classes: int | None,
    ignore_index: int | None = None,
    source: str = "",
) -> list[str]:
    """Plain-words warnings about the label counts of every split.

    ``num_classes`` is the model's, the config's or 1 + the largest label; ``source`` says
    which, for the messages. Labels equal to the loss's ``ignore_index`` are left out.
    """
    out: list[str] = []
    counts = {s: {k: v for k, v in c.items() if k != ignore_index} for s, c in counts.items()}
    for split, c in counts.items():
        out += _range_warnings(split, c, num_classes)
        out += _imbalance_warnings(split, c, num_classes)
    out += _contiguity_warnings(counts)
    out += _missing_warnings(counts, num_classes, source)
    return out


def _contiguity_warnings(counts: dict[str, dict[int, int]]) -> list[str]:
    # Over all splits at once: a class missing from one split has its own warning.
    present = sorted({k for c in counts.values() for k in c if k >= 0})
    if not present or present == list(range(len(present))):
        return []
    return [
        f"labels are not contiguous 0..C-1: {len(present)} distinct values {_list(present)}; "
        f"map them to 0..{len(present) - 1}"
    ]


def _range_warnings(split: str, counts: dict[int, int], num_classes: int | None) -> list[str]:
    out = []
    if num_classes is not None:
        outside = {k: v for k, v in counts.items() if not 0 <= k < num_classes}
        if outside:
            out.append(
                f"{split}: {sum(outside.values())} labels outside [0, {num_classes}) "
                f"({_classes(outside)}); the loss needs 0..{num_classes - 1}"
            )
    elif any(k < 0 for k in counts):
        negative = {k: v for k, v in counts.items() if k < 0}
        out.append(f"{split}: {sum(negative.values())} negative labels ({_classes(negative)})")
    return out


def _imbalance_warnings(split: str, counts: dict[int, int], num_classes: int | None) -> list[str]:
    top = majority(counts)
    classes = num_classes or len(counts)
    if top is None or classes < 2:
        return []
    cls, share = top
    # A third of the way from balanced (1/C) to a single class: 67% of 2 classes, 56% of 3,
    # and never below 40% (many classes).
    if share >= max(MAJORITY_FLOOR, 1 / classes + (1 - 1 / classes) / 3):
        return [f"{split}: {share:.0%} of samples are class {cls}"]
    rarest = min(counts, key=lambda k: (counts[k], k))
    if counts[cls] >= RARE_RATIO * counts[rarest]:
        return [
            f"{split}: class {rarest} has {counts[rarest]} samples, "
            f"{counts[cls] / counts[rarest]:.0f}x fewer than class {cls} ({counts[cls]})"
        ]
    return []


def _missing_warnings(
    counts: dict[str, dict[int, int]], num_classes: int | None, source: str
) -> list[str]:
    seen = {k for c in counts.values() for k in c}
    out = []
    if num_classes is not None:
        never = [k for k in range(num_classes) if k not in seen]
        if never:
            word = "class" if len(never) == 1 else "classes"
            out.append(
                f"{word} {_list(never)} never appear{'s' if len(never) == 1 else ''} in any "
                f"split ({num_classes} classes{', from ' + source if source else ''})"
            )
    for split, c in counts.items():
        if not c:
            continue
        absent = [k for k in sorted(seen - set(c))
                  if num_classes is None or 0 <= k < num_classes]  # fmt: skip
        if len(absent) == 1:
            k = absent[0]
            where = next(s for s, other in counts.items() if k in other)
            out.append(f"{split}: class {k} never appears ({where} has {counts[where][k]})")
        elif absent:
            out.append(f"{split}: classes {_list(absent)} never appear (other splits have them)")
    return out


def _classes(counts: dict[int, int]) -> str:
    items = sorted(counts.items())
    shown = ", ".join(f"{k}: {v}" for k, v in items[:SHOWN])
    return shown + (", ..." if len(items) > SHOWN else "")


def _list(values: list[int]) -> str:
    shown = ", ".join(str(v) for v in values[:SHOWN])
    return shown + (f", ... ({len(values)} in all)" if len(values) > SHOWN else "")


def json_counts(counts: dict[int, int]) -> dict[str, Any]:
    """Counts with string keys, as JSON wants them, sorted by class."""
    return {str(k): v for k, v in sorted(counts.items())}
