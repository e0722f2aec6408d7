"""Resolve user objects given as import paths, ``package.module:attr``.

Users train their own ``nn.Module`` or ``Dataset`` by naming it in the config; nothing
has to subclass a trainwell class.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

from trainwell.errors import UserError


def is_import_path(name: str) -> bool:
    """True for ``pkg.mod:attr`` strings, as opposed to built-in names like ``mlp``."""
    return ":" in name


def resolve(path: str, key: str) -> Any:
    """Import ``package.module:attr`` (``attr`` may be dotted) and return the object.

    The current working folder is importable, as with ``python -m``, so a ``models.py``
    beside the config just works.

    Example:
        >>> resolve("collections:OrderedDict", "model.name").__name__
        'OrderedDict'
    """
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise UserError(f"{key}: {path!r} is not an import path; write 'package.module:attr'")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"{key}: cannot import module {module_name!r} ({exc})") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UserError(f"{key}: module {module_name!r} has no attribute {attr!r}") from None
    return obj


def call_with(
    factory: Any,
    kwargs: dict[str, Any],
    injectable: dict[str, Any],
    key: str,
    args: tuple[Any, ...] = (),
) -> Any:
    """Call ``factory(*args, **kwargs)``, adding values from ``injectable`` that it accepts.

    Built-in and user models alike can take ``num_classes`` or ``input_shape`` from the
    data without the user repeating them; an explicit kwarg always wins.
    """
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    full = {k: v for k, v in injectable.items() if (k in params or takes_any) and k not in kwargs}
    full.update(kwargs)
    try:
        inspect.signature(factory).bind(*args, **full)
    except TypeError as exc:
        name = getattr(factory, "__name__", factory)
        raise UserError(f"{key}: cannot call {name}: {exc}{_hint(exc, injectable)}") from None
    except ValueError:
        pass  # no signature to check (builtins); let the call speak for itself
    return factory(*args, **full)


def _hint(exc: TypeError, injectable: dict[str, Any]) -> str:
    # A value the data could have given but did not (a data set without .targets).
    for name in ("num_classes", "input_shape"):
        if f"'{name}'" in str(exc) and name not in injectable:
            return (
                f"; the data does not say its {name} (no .targets to count classes from): "
                f"set it in the kwargs" + (" or data.num_classes" if name == "num_classes" else "")
            )
    return ""
