"""User callbacks: plain objects whose methods the trainer calls at named points.

No base class and no 36-hook zoo: a callback defines any of :data:`EVENTS`, and only the
methods it defines are called, each with a read-only :class:`Context`. Checkpoints, early
stopping and the doctor stay explicit in the trainer; callbacks are for the user's own
work (push a sample prediction, save an extra artifact, stop on a custom rule, log a
metric of its own with ``ctx.log``).

A value logged with ``ctx.log("val/score", v)`` goes to every logger at the current step
and into the run's metrics (``summary.json``); logged in ``on_eval_end`` (or during the
epoch), it is monitorable (``early_stop.monitor``, ``best.pt``). A callback may declare
the names it logs, ``logs = ("val/score",)``, so that a monitor naming none of the run's
metrics is refused before the first step even when callbacks log.

Example:
    >>> class StopAt:
    ...     def __init__(self, step):
    ...         self.step = step
    ...     def on_step_end(self, ctx):
    ...         if ctx.step >= self.step:
    ...             ctx.request_stop()
    >>> cbs = Callbacks([StopAt(3)])
    >>> cbs.call("on_step_end", step=3, epoch=0)
    >>> cbs.stop_requested_by
    'StopAt'
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from trainwell.engine.state.signals import foreign
from trainwell.errors import UserError
from trainwell.imports import build_object

EVENTS = ("on_fit_start", "on_step_end", "on_eval_end", "on_checkpoint", "on_fit_end")


class CallbackError(UserError):
    """A callback raised: the run stops (resumable from its last checkpoint)."""


@dataclass(frozen=True)
class Context:
    """What a callback sees: where the run is, and the objects it may read.

    Attributes:
        step, epoch: optimizer steps taken, and the current epoch (0-based).
        metrics: the latest metrics (``val/loss``, ``train/...``; at ``on_eval_end``, that
            evaluation's), read-only.
        run_dir: the run directory (``None`` off rank 0).
        model, optimizer: the model being trained and its optimizer.
        checkpoint: at ``on_checkpoint``, the names just written (``["last.pt"]``).
        loggers: the run's loggers by name (``"tensorboard"``, ``"mlflow"``, ...), to log
            more (``ctx.loggers["tensorboard"].writer.add_figure(...)``); empty off rank 0.
        val_loader: the validation ``DataLoader`` (``None`` without validation data).

    ``request_stop()`` ends training; ``log(name, value)`` logs a metric of the callback's.
    """

    step: int
    epoch: int
    metrics: Mapping[str, float] = field(default_factory=dict)
    run_dir: Path | None = None
    model: Any = None
    optimizer: Any = None
    checkpoint: tuple[str, ...] = ()
    loggers: Mapping[str, Any] = field(default_factory=dict)
    val_loader: Any = None
    _stop: Callable[[], None] = field(default=lambda: None, repr=False)
    _log: Callable[[str, Any], None] | None = field(default=None, repr=False)

    def request_stop(self) -> None:
        """End training at this step boundary (or, at ``on_eval_end``, this epoch's end)."""
        self._stop()

    def log(self, name: str, value: Any) -> None:
        """Log ``value`` (a number or a one-element tensor) as metric ``name`` (``split/name``,
        e.g. ``val/score``) to every logger at the current step; monitorable when logged in
        ``on_eval_end`` or during the epoch.

        Example:
            >>> logged = []
            >>> Context(step=3, epoch=0, _log=lambda n, v: logged.append((n, v))).log(
            ...     "val/score", 0.5)
            >>> logged
            [('val/score', 0.5)]
        """
        if self._log is None:
            raise UserError("ctx.log: this context belongs to no run; nothing to log to")
        self._log(name, value)


class Callbacks:
    """The run's callbacks, dispatched by event; their state goes in the checkpoint."""

    def __init__(self, objects: Sequence[Any] = ()) -> None:
        self.objects = list(objects)
        # Bound methods per event, found once: an event no callback defines costs nothing.
        self.handlers = {
            event: [(obj, getattr(obj, event)) for obj in self.objects
                    if callable(getattr(obj, event, None))]
            for event in EVENTS
        }  # fmt: skip
        self.stop_requested_by: str | None = None
        # ctx.log: the trainer's writer (to every logger at the current step), the values
        # logged since the last epoch end (monitorable), and the names that are the
        # engine's own at this point (a second value under one name would be ambiguous).
        self.writer: Callable[[str, float], None] | None = None
        self.logged: dict[str, float] = {}
        self.reserved: Mapping[str, Any] = {}

    def has(self, event: str) -> bool:
        return bool(self.handlers[event])

    def declared_logs(self) -> tuple[frozenset[str], list[str]]:
        """The names callbacks declare (``logs = ("val/score",)``), and the callbacks that
        declare none (they may ``ctx.log`` anything)."""
        declared: set[str] = set()
        silent = []
        for obj in self.objects:
            names = getattr(obj, "logs", None)
            if isinstance(names, str):
                names = (names,)
            if names is None:
                silent.append(type(obj).__name__)
            else:
                declared.update(str(n) for n in names)
        return frozenset(declared), silent

    def log(self, name: str, value: Any) -> None:
        """``ctx.log``: check, note for the epoch's end, and write at once."""
        value = _loggable(name, value, self.reserved)
        if self.writer is None:
            raise UserError("ctx.log: the run has no loggers open yet")
        self.logged[name] = value
        self.writer(name, value)

    def take_logged(self) -> dict[str, float]:
        """The values logged since the last call (the epoch's), and none kept."""
        logged, self.logged = self.logged, {}
        return logged

    def call(self, event: str, **context: Any) -> None:
        """Call every callback's ``event`` method with a :class:`Context` of ``context``."""
        for obj, method in self.handlers[event]:
            name = type(obj).__name__
            ctx = Context(**context, _stop=functools.partial(self._stop, name), _log=self.log)
            try:
                with foreign(f"callback {name}.{event}"):  # a hung one is aborted after a stop
                    method(ctx)
            except Exception as exc:
                detail = " ".join(str(exc).split())[:200]
                raise CallbackError(
                    f"callback {name}.{event} failed: {type(exc).__name__}: {detail}"
                ) from exc

    def _stop(self, name: str) -> None:
        self.stop_requested_by = self.stop_requested_by or name

    def state_dict(self) -> dict[str, Any]:
        """Each stateful callback's ``state_dict()``, keyed by position and class."""
        return {
            _key(i, obj): obj.state_dict()
            for i, obj in enumerate(self.objects)
            if callable(getattr(obj, "state_dict", None))
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for i, obj in enumerate(self.objects):
            saved = state.get(_key(i, obj))
            if saved is not None and callable(getattr(obj, "load_state_dict", None)):
                obj.load_state_dict(saved)


def _loggable(name: Any, value: Any, reserved: Mapping[str, Any]) -> float:
    """``value`` as a float, or one line saying why ``ctx.log`` refuses it."""
    split, _, rest = name.partition("/") if isinstance(name, str) else ("", "", "")
    if not split or not rest or name != name.strip():
        raise UserError(f"ctx.log: write the name as split/name, e.g. val/score; got {name!r}")
    if name in reserved:
        raise UserError(f"ctx.log: {name} is the engine's own metric here; log another name")
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().item())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    shown = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else (
        f"a {type(value).__name__}")  # fmt: skip
    raise UserError(f"ctx.log: {name} must be a number or a one-element tensor; got {shown}")


def _key(i: int, obj: Any) -> str:
    return f"{i}:{type(obj).__name__}"


def build_callbacks(specs: Sequence[Any], given: Sequence[Any] | None = None) -> Callbacks:
    """Callbacks from the config (``"pkg.module:Cls"`` or ``{name, kwargs}``), then ``given``.

    Example:
        >>> build_callbacks([42])
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: callbacks: 42 is not 'pkg.module:Cls' or {name, kwargs}
    """
    objects = [_build(spec) for spec in specs]
    return Callbacks([*objects, *(given or [])])


def _build(spec: Any) -> Any:
    name, obj = build_object(spec, "callbacks")
    if not any(callable(getattr(obj, event, None)) for event in EVENTS):
        raise UserError(
            f"callbacks: {name!r} defines none of {', '.join(EVENTS)}; it would never be called"
        )
    return obj


def read_only(metrics: Mapping[str, float]) -> Mapping[str, float]:
    """A view of ``metrics`` a callback cannot change (no copy per step)."""
    return MappingProxyType(metrics)
