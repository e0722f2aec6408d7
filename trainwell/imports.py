"""Resolve user objects given as import paths, ``package.module:attr``.

Users train their own ``nn.Module`` or ``Dataset`` by naming it in the config; nothing
has to subclass a trainwell class.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainwell import trust
from trainwell.errors import UserError


def is_import_path(name: str) -> bool:
    """True for ``pkg.mod:attr`` strings, as opposed to built-in names like ``mlp``."""
    return ":" in name


def resolve(path: str, key: str) -> Any:
    """Import ``package.module:attr`` (``attr`` may be dotted) and return the object.

    The current working folder is importable, as with ``python -m``, so a ``models.py``
    beside the config just works.

    Configs are code: a config runs what it names, like a script. Paths into Python's
    builtins and standard library (``os:system``, ``subprocess:run``, ``torch:os.system``)
    are refused: none of them is a model, a data set, a loss or a step, and some run
    commands. torch, third-party and the user's own modules resolve; under safe mode
    (``--safe``, :mod:`trainwell.trust`) only the user's own modules and an allow-list do.

    Example:
        >>> resolve("torch.nn:MSELoss", "train.loss").__name__
        'MSELoss'
        >>> resolve("os:system", "model.name")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: model.name: 'os:system' is a standard-library callable, ...
    """
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise UserError(f"{key}: {path!r} is not an import path; write 'package.module:attr'")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    # Refused before the import: importing some standard modules already acts
    # (antigravity opens a browser).
    _refuse_stdlib(module_name, path, key)
    if module_name not in sys.modules:  # --safe: by name, before its import can act
        trust.check_module(module_name, path, key)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"{key}: cannot import module {module_name!r} ({exc})") from exc
    chain = []
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UserError(f"{key}: module {module_name!r} has no attribute {attr!r}") from None
        chain.append(obj)
    # A third-party module's own imports reach the standard library too (torch:os.system).
    for step in chain:
        _refuse_stdlib(_module_of(step), path, key, obj)
        trust.check_module(_module_of(step), path, key, step)
    return obj


# Python's own library folder: what is in it (site-packages aside) is the standard library.
_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()

# What each key that takes an import path expects, for the refusal's message.
_EXPECTED = {
    "model.name": "a model",
    "data.name": "a data set",
    "data.collate": "a collate function",
    "data.sampler": "a sampler factory",
    "data.batch_sampler": "a batch sampler factory",
    "train.loss": "a loss",
    "train.step": "a step function",
    "train.eval_step": "a step function",
    "optim.name": "an optimizer",
    "sched.name": "a scheduler",
}


def _refuse_stdlib(module: str | None, path: str, key: str, obj: Any = None) -> None:
    if _is_stdlib(module):
        if obj is None:  # not imported by us: look only at what is loaded already
            obj = _loaded(path)
        kind = "object" if obj is not None and not callable(obj) else "callable"
        raise UserError(
            f"{key}: {path!r} is a standard-library {kind}, not "
            f"{_EXPECTED.get(key, 'what ' + key + ' takes')}; configs are code: run only "
            "configs you trust; --safe for configs from elsewhere"
        )


def _is_stdlib(module: str | None) -> bool:
    top = (module or "").partition(".")[0]
    if top not in sys.stdlib_module_names:  # builtins included
        return False
    # A user's own test.py or code.py (in the working folder, or on PYTHONPATH) shadows
    # the standard module of that name: judged by where the module's file is, Python's own
    # library folder or not. find_spec of a top-level name only looks; it runs nothing.
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return True
    if spec is None or not spec.has_location or not spec.origin:
        return True  # built into the interpreter (sys, builtins)
    origin = Path(spec.origin).resolve()
    return _STDLIB in origin.parents and "site-packages" not in origin.parts


def _loaded(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    obj = sys.modules.get(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    return obj


def _module_of(obj: Any) -> str | None:
    """The name of the module that defines ``obj`` (a module's own name for a module)."""
    while isinstance(obj, functools.partial):  # judged by what it calls
        obj = obj.func
    if inspect.ismodule(obj):
        return obj.__name__
    name = getattr(obj, "__module__", None)
    if isinstance(name, str):
        return name
    # Method descriptors and instances of builtin types (a float, a list's method) have
    # no __module__; their class says where they come from.
    owner = getattr(obj, "__objclass__", None) or type(obj)
    return getattr(owner, "__module__", None)


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
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    full = {k: v for k, v in injectable.items() if (k in params or takes_any) and k not in kwargs}
    full.update(kwargs)
    trust.check_kwargs(kwargs, f"{key}.kwargs")
    try:
        inspect.signature(factory).bind(*args, **full)
    except TypeError as exc:
        name = getattr(factory, "__name__", factory)
        raise UserError(f"{key}: cannot call {name}: {exc}{_hint(exc, injectable)}") from None
    except ValueError:
        pass  # no signature to check (builtins); let the call speak for itself
    return factory(*args, **full)


def build_object(spec: Any, key: str) -> tuple[str, Any]:
    """An object from a config entry ``"pkg.module:Cls"`` or ``{name, kwargs}``.

    Returns ``(name, obj)``. The callbacks and the loggers of a config are given this way.

    Example:
        >>> name, obj = build_object({"name": "torch.nn:Linear", "kwargs": {"in_features": 2,
        ...                           "out_features": 1}}, "log.loggers")
        >>> name, obj.out_features
        ('torch.nn:Linear', 1)
        >>> build_object(42, "log.loggers")
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: log.loggers: 42 is not 'pkg.module:Cls' or {name, kwargs}
    """
    if isinstance(spec, str):
        name, kwargs = spec, {}
    elif isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
        name, kwargs = spec["name"], dict(spec.get("kwargs") or {})
    else:
        raise UserError(f"{key}: {spec!r} is not 'pkg.module:Cls' or {{name, kwargs}}")
    factory = resolve(name, key)
    if not callable(factory):
        raise UserError(f"{key}: {name!r} is a {type(factory).__name__}, not a class")
    return name, call_with(factory, kwargs, {}, key)


def parse_spec(spec: Any, key: str) -> tuple[str, dict[str, Any]]:
    """``(import path, kwargs)`` of a config entry ``"pkg.module:fn"`` or ``{name, kwargs}``.

    Only the keys ``name`` and ``kwargs`` are taken; anything else is a typo, refused.

    Example:
        >>> parse_spec({"name": "pads:collate", "kwargs": {"pad_id": 0}}, "data.collate")
        ('pads:collate', {'pad_id': 0})
        >>> parse_spec({"name": "pads:collate", "pad_id": 0}, "data.collate")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: data.collate: unknown key 'pad_id'; write ...
    """
    if isinstance(spec, str):
        return spec, {}
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        raise UserError(f"{key}: {spec!r} is not 'pkg.module:Cls' or {{name, kwargs}}")
    for extra in set(spec) - {"name", "kwargs"}:
        raise UserError(
            f"{key}: unknown key {extra!r}; write {{name: 'pkg.module:fn', kwargs: {{...}}}}"
        )
    kwargs = spec.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise UserError(f"{key}: kwargs must be a mapping; got {kwargs!r}")
    return spec["name"], dict(kwargs)


def _hint(exc: TypeError, injectable: dict[str, Any]) -> str:
    # A value the data could have given but did not (a data set without .targets).
    for name in ("num_classes", "input_shape"):
        if f"'{name}'" in str(exc) and name not in injectable:
            return (
                f"; the data does not say its {name} (no .targets to count classes from): "
                f"set it in the kwargs" + (" or data.num_classes" if name == "num_classes" else "")
            )
    return ""
