"""Small helpers the component configs share: a field with help text, and checks.

Each component keeps its own dataclass next to the code it configures; these helpers only
keep the declarations short and the error messages uniform.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
from dataclasses import field
from typing import Any

from trainwell.errors import UserError


def option(default: Any, help: str) -> Any:
    """A dataclass field with a default and a help text for the config reference.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Cfg:
        ...     lr: float = option(1e-3, "learning rate")
    """
    # Lists, dicts and nested configs are mutable: each instance gets its own copy.
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def check(condition: bool, key: str, message: str) -> None:
    """Raise a :class:`UserError` naming ``key`` unless ``condition`` holds."""
    if not condition:
        raise UserError(f"{key}: {message}")


def check_choice(value: str, key: str, choices: tuple[str, ...]) -> None:
    """Raise a :class:`UserError` unless ``value`` is one of ``choices``."""
    check(value in choices, key, f"expected one of {', '.join(choices)}; got {value!r}")


# Counts (batch sizes, steps, epochs, classes) above this are typos, not plans: they
# would overflow 32-bit indices or never finish, and fail far from the config line.
MAX_COUNT = 2**31


def check_int(value: Any, key: str, low: int = 1, high: int = MAX_COUNT) -> None:
    """Raise a :class:`UserError` unless ``value`` is an integer in ``[low, high]``.

    Example:
        >>> check_int(0, "train.epochs")
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: train.epochs: must be positive; got 0
    """
    # bool is an int to Python, but `true` for a count is a mistake, not 1.
    is_int = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    check(is_int, key, f"must be an integer; got {value!r}")
    if value < low:
        raise UserError(f"{key}: must be {'positive' if low == 1 else f'>= {low}'}; got {value}")
    check(value <= high, key, f"must be at most {high}; got {value}")


def check_number(
    value: Any,
    key: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise a :class:`UserError` unless ``value`` is a finite number within the bounds.

    ``None`` leaves a side unbounded; ``low_open`` / ``high_open`` exclude the bound
    itself. NaN and infinities are always refused: accepted, they train to NaN.

    Example:
        >>> check_number(float("inf"), "optim.lr", 0, 10, low_open=True)
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: optim.lr: must be a finite number in (0, 10]; got inf
    """
    wanted = f"must be a finite number {_interval(low, high, low_open, high_open)}".rstrip()
    is_number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    check(is_number, key, f"{wanted}; got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float
        number = math.inf
    inside = math.isfinite(number)
    if inside and low is not None:
        inside = number > low if low_open else number >= low
    if inside and high is not None:
        inside = number < high if high_open else number <= high
    check(inside, key, f"{wanted}; got {value}")


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if high is None:
        return "" if low is None else f"{'>' if low_open else '>='} {low}"
    if low is None:
        return f"{'<' if high_open else '<='} {high}"
    return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
