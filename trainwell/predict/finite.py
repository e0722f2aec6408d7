"""NaN and Inf in what predict is given: one warning line, or a refusal when no sample
is usable.

A model maps a NaN input to a NaN (or an arbitrary) prediction without a word; a file
of such predictions looks like any other. So predict counts the samples and values that
are not finite: some of them is a warning on stderr (the predictions are still written,
those rows are the model's answer to a broken input); every sample is refused, since
there is nothing to predict from.

Example:
    >>> import numpy as np
    >>> x = np.zeros((4, 3), dtype=np.float32); x[1, 2] = np.nan
    >>> nonfinite_note(x, "INPUT x.npy")  # doctest: +ELLIPSIS
    'INPUT x.npy: 1 of 4 samples hold NaN/Inf (1 of 12 values); their predictions are NaN or ...'
"""

from __future__ import annotations

import sys

import numpy as np

from trainwell.errors import UserError


def count_nonfinite(arr: np.ndarray) -> tuple[int, int]:
    """(samples with a NaN/Inf value, NaN/Inf values) of an array whose first axis is
    the samples; integer arrays have none."""
    if arr.dtype.kind not in "fc" or arr.size == 0:
        return 0, 0
    bad = ~np.isfinite(arr)
    per_sample = bad.reshape(len(arr), -1).any(axis=1) if arr.ndim > 1 else bad
    return int(per_sample.sum()), int(bad.sum())


def nonfinite_note(arr: np.ndarray, name: str) -> str | None:
    """The warning for ``arr`` (``None`` when every value is finite); raises
    :class:`UserError` when every sample holds a NaN/Inf."""
    samples, values = count_nonfinite(arr)
    if not samples:
        return None
    n = len(arr) if arr.ndim else 1
    counts = f"{values} of {arr.size} values"
    if samples == n:
        raise UserError(
            f"{name}: every sample holds NaN/Inf ({counts} not finite); nothing to predict "
            "from: clean the input (np.nan_to_num, or drop those rows)"
        )
    return (f"{name}: {samples} of {n} samples hold NaN/Inf ({counts}); their predictions "
            "are NaN or meaningless")  # fmt: skip


def warn(note: str | None) -> None:
    """One line on stderr, as the command line words its warnings."""
    if note is not None:
        print(f"trainwell: warning: {note}", file=sys.stderr)
