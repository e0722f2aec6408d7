"""Small helpers the component configs share: a field with help text, and checks.

Each component keeps its own dataclass next to the code it configures; these helpers only
keep the declarations short and the error messages uniform.
"""

from __future__ import annotations

import copy
import dataclasses
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
