"""Safe mode checked on a whole config at once, before anything of the run is written.

:mod:`trainwell.trust` says what safe mode allows; this module finds every import path a
config gives (the keys below) and resolves each under the policy, and refuses keyword
arguments that load or run code anywhere in the config. So a config from elsewhere fails
with one line before its run folder exists, not halfway through building the run.

Example:
    >>> from trainwell import trust
    >>> was = trust.active()
    >>> trust.activate()
    Policy(extra=())
    >>> check_config({"model": {"name": "numpy:load", "kwargs": {}}})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainwell.errors.UserError: model.name: 'numpy:load' reaches numpy, outside what --safe ...
    >>> trust.reset(was)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from trainwell import trust
from trainwell.errors import UserError
from trainwell.imports import is_import_path, resolve

# Keys whose value is an import path (or a built-in name).
_PLAIN = (
    ("model", "name"),
    ("data", "name"),
    ("train", "loss"),
    ("train", "step"),
    ("train", "eval_step"),
    ("optim", "name"),
    ("sched", "name"),
)
# Keys whose value is a spec: "pkg.mod:fn" or {name, kwargs}.
_SPECS = (("data", "collate"), ("data", "sampler"), ("data", "batch_sampler"))


def import_paths(config: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Every ``(key, import path)`` the config gives, e.g. ``("model.name", "nets:Net")``.

    Example:
        >>> list(import_paths({"model": {"name": "nets:Net"}, "callbacks": ["cb:Log"]}))
        [('model.name', 'nets:Net'), ('callbacks', 'cb:Log')]
    """
    for section, name in _PLAIN:
        yield from _paths(f"{section}.{name}", (config.get(section) or {}).get(name))
    for section, name in _SPECS:
        yield from _paths(f"{section}.{name}", (config.get(section) or {}).get(name))
    for spec in config.get("callbacks") or []:
        yield from _paths("callbacks", spec)
    for spec in (config.get("log") or {}).get("loggers") or []:
        yield from _paths("log.loggers", spec)
    for metric, spec in ((config.get("train") or {}).get("metrics") or {}).items():
        yield from _paths(f"train.metrics.{metric}", spec)


def _paths(key: str, spec: Any) -> Iterator[tuple[str, str]]:
    name = spec.get("name") if isinstance(spec, Mapping) else spec
    if isinstance(name, str) and is_import_path(name):
        yield key, name


def check_config(config: Mapping[str, Any]) -> None:
    """Under safe mode, resolve every import path of ``config`` and check its kwargs.

    Resolving imports only what the policy allows (checked by name first), so this runs
    no code from outside it. Does nothing when safe mode is off.
    """
    if trust.active() is None:
        return
    trust.check_kwargs(config, "")
    for key, path in import_paths(config):
        resolve(path, key)


def refuse_widening(file_data: Mapping[str, Any] | None, overrides: list[str]) -> None:
    """A config file run with ``--safe`` must not widen safe mode itself.

    When safe mode comes from the command line (``--safe`` is the override
    ``run.safe=true``), ``run.allow_imports`` is honoured from the command line only: a
    file from elsewhere cannot let itself out. A file that turns safe mode on for itself
    may widen it (without it, the file is trusted in full anyway).
    """
    asked = any(o.partition("=")[0].strip() == "run.safe" for o in overrides)
    run = (file_data or {}).get("run") or {}
    if asked and isinstance(run, Mapping) and run.get("allow_imports"):
        raise UserError(
            "run.allow_imports: a config file cannot widen --safe; give "
            "run.allow_imports=[PREFIX] on the command line if you trust that code"
        )
