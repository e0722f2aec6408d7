"""The logger protocol, and the fan-out that sends each call to every logger of a run.

A logger is any object with ``log_metrics(step, metrics)``; it may also define
``log_config(config)``, ``log_artifact(path)``, ``flush()`` (called when a checkpoint is
written, so what it logged up to the checkpoint survives a crash), ``close()`` or
``close(status)``, and ``state_dict()`` / ``load_state_dict(state)`` (kept in the
checkpoint, e.g. MLflow's run id). Only the methods it defines are called.

Metric names are ``split/name``: ``train/loss``, ``train/lr``, ``val/accuracy``,
``test/loss``, ``train/mem/rss_mb``.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from trainwell.engine.state.signals import foreign

METHODS = ("log_metrics", "log_config", "log_artifact", "flush", "close")


@runtime_checkable
class Logger(Protocol):
    """What a logger must have; the other methods of the module docstring are optional.

    Example:
        >>> class Printer:
        ...     def log_metrics(self, step, metrics):
        ...         print(step, metrics)
        >>> isinstance(Printer(), Logger)
        True
    """

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None: ...


class Loggers:
    """The run's loggers, each call sent to each; a failing optional logger is switched off.

    ``essential`` names loggers whose errors must stop the run (the CSV: losing it loses
    the run's record). Any other logger that raises (a locked database, a full disk) is
    reported once through ``say`` and not called again; training goes on.

    Example:
        >>> class Broken:
        ...     def log_metrics(self, step, metrics):
        ...         raise OSError("disk full")
        >>> said = []
        >>> logs = Loggers([("broken", Broken())], say=said.append)
        >>> logs.log_metrics(1, {"train/loss": 0.5})
        >>> said[0].split(";")[0]
        'warning: logger broken failed in log_metrics (OSError: disk full)'
        >>> logs.names
        []
    """

    def __init__(
        self,
        named: list[tuple[str, Any]] | None = None,
        say: Callable[[str], None] = print,
        essential: tuple[str, ...] = (),
    ) -> None:
        self._named = list(named or [])
        self._say = say
        self._essential = set(essential)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self._named]

    def add(self, named: list[tuple[str, Any]]) -> None:
        """More loggers, after those given (the optional ones start once the run's own
        are in place: a store that cannot start then fails a run that records it)."""
        self._named += named

    def active(self) -> Mapping[str, Any]:
        """The loggers still on, by name (a callback may write to one, e.g. an image)."""
        return MappingProxyType(dict(self._named))

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self._call("log_metrics", step, metrics)

    def log_config(self, config: Mapping[str, Any]) -> None:
        self._call("log_config", config)

    def log_artifact(self, path: Path) -> None:
        self._call("log_artifact", path)

    def flush(self) -> None:
        self._call("flush")

    def close(self, status: str = "completed") -> None:
        """Close every logger (with the run's status where ``close`` takes one); then none."""
        for name, logger in list(self._named):
            close = getattr(logger, "close", None)
            if callable(close):
                self._guarded(name, "close", close, *_status_arg(close, status))
        self._named = []

    def state_dict(self) -> dict[str, Any]:
        """Each logger's ``state_dict()`` by name, for the checkpoint."""
        return {
            name: logger.state_dict()
            for name, logger in self._named
            if callable(getattr(logger, "state_dict", None))
        }

    def _call(self, method: str, *args: Any) -> None:
        for name, logger in list(self._named):
            fn = getattr(logger, method, None)
            if callable(fn):
                self._guarded(name, method, fn, *args)

    def _guarded(self, name: str, method: str, fn: Callable[..., Any], *args: Any) -> None:
        if name in self._essential:
            fn(*args)
            return
        try:
            # After a stop signal a hung call (a tracking server gone silent) is aborted.
            with foreign(f"logger {name}'s {method}"):
                fn(*args)
        except KeyboardInterrupt:
            # Stopped inside this logger: it is not called again, not even to close.
            self._named = [(n, obj) for n, obj in self._named if n != name]
            raise
        except Exception as exc:
            detail = " ".join(str(exc).split())[:200]
            self._say(
                f"warning: logger {name} failed in {method} ({type(exc).__name__}: {detail}); "
                "it is switched off, training goes on"
            )
            self._named = [(n, obj) for n, obj in self._named if n != name]
            if method != "close":
                # Let it release what it holds (threads, files); its errors are no news.
                _quietly(getattr(fn, "__self__", None))


def _quietly(logger: Any) -> None:
    close = getattr(logger, "close", None)
    if not callable(close):
        return
    # The first error was reported; one more from closing adds nothing.
    with contextlib.suppress(Exception):
        close(*_status_arg(close, "failed"))


def _status_arg(close: Callable[..., Any], status: str) -> tuple[str, ...]:
    """``(status,)`` for a ``close(status)``, ``()`` for a plain ``close()``."""
    try:
        takes_status = "status" in inspect.signature(close).parameters
    except (TypeError, ValueError):
        takes_status = False
    return (status,) if takes_status else ()
