"""User callbacks: plain objects whose methods the trainer calls at named points.

No base class and no 36-hook zoo: a callback defines any of :data:`EVENTS`, and only the
methods it defines are called, each with a read-only :class:`Context`. Checkpoints, early
stopping and the doctor stay explicit in the trainer; callbacks are for the user's own
work (push a sample prediction, save an extra artifact, stop on a custom rule).

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

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

    def request_stop(self) -> None:
        """End training at this step boundary (or, at ``on_eval_end``, this epoch's end)."""
        self._stop()


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

    def has(self, event: str) -> bool:
        return bool(self.handlers[event])

    def call(self, event: str, **context: Any) -> None:
        """Call every callback's ``event`` method with a :class:`Context` of ``context``."""
        for obj, method in self.handlers[event]:
            name = type(obj).__name__
            ctx = Context(**context, _stop=lambda name=name: self._stop(name))
            try:
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
