"""What several probes follow, kept once per run: whether an optimizer steps on fresh
gradients (``step-before-backward``, ``loss-no-gradient``), which weights the optimizers
hold (``param-not-in-optimizer``, ``unregistered-module``).

The dispatcher makes one :class:`Trackers` per run and hands it to every probe that has
an ``attach(trackers)`` method; a probe asks it for the kinds it follows, and the first
ask builds one. The kinds live with the analysis above the dispatcher
(:mod:`trainwell.doctor.gradients`, :mod:`trainwell.doctor.coverage`): this store knows
none of them, so the layers still import downward only.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

T = TypeVar("T")


class Trackers:
    """One of each kind of tracker per run, built on the first ask (with no arguments).
    A tracker is fed by each probe that follows it, so its updates are idempotent: the
    second probe to hear an event changes nothing.

    Example:
        >>> trackers = Trackers()
        >>> trackers.get(dict) is trackers.get(dict)
        True
        >>> trackers.made()
        [<class 'dict'>]
    """

    def __init__(self) -> None:
        self._made: dict[type, Any] = {}

    def get(self, kind: type[T]) -> T:
        """The run's tracker of ``kind``, built now if no probe asked for one yet."""
        made = self._made.get(kind)
        if made is None:
            made = self._made[kind] = kind()
        return cast(T, made)  # stored under its own type: the dict cannot say so

    def made(self) -> list[type]:
        """The kinds built so far, in the order first asked."""
        return list(self._made)
