"""The config trust model: a config is code, and ``--safe`` is for configs from elsewhere.

A config names Python objects by import path (``model.name: mypkg.nets:Net``), and
trainwell imports and calls them with the config's keyword arguments. So a config can run
anything an installed package offers: ``yaml:unsafe_load``, ``numpy:load`` with
``allow_pickle``, ``torch.hub:load``. By default trainwell trusts the config as it trusts
a script you run (only the standard library is refused: no model is in it).

Under safe mode (``--safe`` on every verb that reads a config, or ``run.safe: true``) an
import path resolves only into

* the user's own modules: files under the working directory, not in a site-packages;
* an allow-list: torch's ``torch.nn`` / ``torch.optim`` / ``torch.optim.lr_scheduler`` /
  ``torch.utils.data``, ``torchmetrics``, and trainwell's models, data, callbacks,
  samplers and metric objects;
* prefixes given with ``run.allow_imports=[PREFIX, ...]`` on the command line;

and keyword arguments that load or execute code (``weights_only=False``,
``allow_pickle=True``, ``trust_repo``, ``trust_remote_code``, ``unsafe``, ...) are
refused. Each refusal is one line; the CLI checks the whole config before anything is
written.

Example:
    >>> policy = Policy(extra=("mypkg",))
    >>> policy.allows_name("torch.optim"), policy.allows_name("mypkg.nets")
    (True, True)
    >>> policy.allows_name("numpy")
    False
    >>> check_kwargs({"weights_only": False}, "kw", force=True)
    Traceback (most recent call last):
    ...
    trainwell.errors.UserError: kw.weights_only: False loads or runs code; --safe refuses it
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwell.errors import UserError

# What --safe lets a config name, besides the user's own modules: the parts of torch and
# trainwell a config builds a run from. Not torch itself (torch:load unpickles), not
# torch.hub (runs a repo's hubconf.py), not trainwell's CLI or export (run and write).
ALLOWED: tuple[str, ...] = (
    "torch.nn",
    "torch.optim",
    "torch.utils.data",
    "torchmetrics",
    "trainwell.models",
    "trainwell.data",
    "trainwell.engine.state.callbacks",
    "trainwell.engine.loading.samplers",
    "trainwell.engine.build.metric_objects",
)

# Keyword arguments that make a call load pickles or run code. "on": refused when set
# to anything but false/null; "off": a safety switch, refused when turned off.
_TURNED_ON = frozenset(
    {
        "allow_pickle",
        "trust_repo",
        "trust_remote_code",
        "unsafe",
        "allow_unsafe",
        "unsafe_load",
        "allow_dangerous_deserialization",
        "allow_dangerous_code",
        "allow_code_execution",
        "shell",
        "pickle_module",
        "Loader",
    }
)
_TURNED_OFF = frozenset({"weights_only", "safe_mode"})

HOW_TO_WIDEN = "run.allow_imports=[PREFIX] on the command line widens it for code you trust"


@dataclass(frozen=True)
class Policy:
    """Where import paths may resolve under safe mode; ``extra`` are allowed prefixes."""

    extra: tuple[str, ...] = ()

    def allows_name(self, module: str) -> bool:
        """True for a module in the allow-list or under an ``extra`` prefix (by name)."""
        return any(module == p or module.startswith(p + ".") for p in (*ALLOWED, *self.extra))

    def allows(self, module: str | None) -> bool:
        """True for an allowed name or one of the user's own modules (by where its file is)."""
        if not module:
            return False
        return self.allows_name(module) or _is_users_own(module)


_active: Policy | None = None


def activate(extra: Iterable[str] = ()) -> Policy:
    """Turn safe mode on for this process (widened by ``extra``); it stays on.

    Example:
        >>> was = active()
        >>> activate(["mypkg"]).allows_name("mypkg.nets")
        True
        >>> reset(was)
    """
    global _active
    extra = tuple(str(p).strip() for p in extra if str(p).strip())
    _active = Policy(tuple(dict.fromkeys((*(_active.extra if _active else ()), *extra))))
    return _active


def active() -> Policy | None:
    """The policy in force, or ``None`` when configs are trusted (the default)."""
    return _active


def reset(policy: Policy | None = None) -> None:
    """Set the policy back (tests; a process that turned safe mode on keeps it otherwise)."""
    global _active
    _active = policy


def check_module(module: str | None, path: str, key: str, obj: Any = None) -> None:
    """Refuse ``path`` (one line naming ``key``) if safe mode is on and ``module`` is
    outside it. Called before the import by name, and on every object the path reaches
    (``obj``, defined in ``module``)."""
    if _active is None or _active.allows(module) or _is_torch_op(module, obj):
        return
    raise UserError(
        f"{key}: {path!r} reaches {module or 'an object'}, outside what --safe allows "
        f"(your modules under {Path.cwd()}, {', '.join(ALLOWED[:4])}, trainwell's own); "
        f"{HOW_TO_WIDEN}"
    )


def _is_torch_op(module: str | None, obj: Any) -> bool:
    # torch's C operators (F.conv2d is torch.conv2d, whose __module__ is "torch") compute
    # on tensors only; reached from an allowed module, they are what that module offers.
    # Not the few that touch files (torch.from_file maps, and with shared=True writes one).
    name = str(getattr(obj, "__name__", ""))
    touches_files = any(word in name for word in ("file", "load", "save", "open"))
    return (
        inspect.isbuiltin(obj) and (module or "").partition(".")[0] == "torch" and not touches_files
    )


def check_kwargs(value: Any, key: str, force: bool = False) -> None:
    """Refuse keyword arguments that load or execute code, at any depth of ``value``.

    Checked only under safe mode unless ``force``.
    """
    if _active is None and not force:
        return
    stack: list[tuple[str, Any]] = [(key, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, Mapping):
            for name, sub in item.items():
                dotted = f"{where}.{name}" if where else str(name)
                if _loads_code(str(name), sub):
                    raise UserError(f"{dotted}: {sub!r} loads or runs code; --safe refuses it")
                stack.append((dotted, sub))
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{where}[{i}]", sub) for i, sub in enumerate(item))


def _loads_code(name: str, value: Any) -> bool:
    off = value is None or value is False or str(value).strip().lower() in ("false", "0", "no")
    if name in _TURNED_ON:
        return not off
    if name in _TURNED_OFF:
        return value is not None and off
    return False


def _is_users_own(module: str) -> bool:
    """True if ``module``'s file (or package folder) is under the working directory and
    not in a site-packages: the project's own code, which the user runs anyway."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        places = [getattr(loaded, "__file__", None), *list(getattr(loaded, "__path__", []))]
    else:
        top = module.partition(".")[0]
        cwd = str(Path.cwd())
        if cwd not in sys.path:  # importable as resolve() makes it, as with python -m
            sys.path.insert(0, cwd)
        try:  # a top-level find_spec only looks; it imports and runs nothing
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return False
        if spec is None:
            return False
        places = [spec.origin if spec.has_location else None]
        places += list(spec.submodule_search_locations or [])
    places = [p for p in places if p]
    return bool(places) and all(_under_cwd(Path(p)) for p in places)


def _under_cwd(path: Path) -> bool:
    try:
        resolved = path.resolve()
    except OSError:
        return False
    parts = set(resolved.parts)
    if "site-packages" in parts or "dist-packages" in parts:
        return False
    return Path.cwd().resolve() in resolved.parents


SAFE_HELP = (
    "for a config from elsewhere: import paths only into your own modules (under the "
    "working directory) and torch's nn/optim/data, torchmetrics and trainwell; keyword "
    "arguments that load or run code refused; run.allow_imports=[PREFIX] widens it"
)


def add_safe_flags(sub: Any) -> None:
    """Add ``--safe`` to every verb of ``sub`` that reads a config (has ``--config``) and
    to ``export`` and ``predict`` (which rebuild a run from the config in a checkpoint)."""
    for name, parser in sub.choices.items():
        reads = any("--config" in action.option_strings for action in parser._actions)
        if reads or name in ("export", "predict"):
            parser.add_argument("--safe", action="store_true", help=SAFE_HELP)


def apply_args(args: Any) -> None:
    """Turn safe mode on for a command line with ``--safe``.

    It becomes the override ``run.safe=true`` too, so that processes started for the run
    (``--nproc``) and the run's saved config say so.
    """
    if not getattr(args, "safe", False):
        return
    activate()
    overrides = getattr(args, "overrides", None)
    if isinstance(overrides, list):
        overrides.append("run.safe=true")
