"""A probe's handlers, looked up once: each ``on_*`` method must name an event.

A misspelt handler (``on_forwad``) would otherwise never be called and its probe would
stay silent for good; the dispatcher refuses it when it is made, naming the closest
event.
"""

from __future__ import annotations

import difflib

from trainwell.doctor.events import END, EVENTS, Handler, Probe
from trainwell.errors import UserError


class UnknownEvent(UserError):
    """A probe has an ``on_*`` method that names no event.

    Example:
        >>> class Typo:
        ...     def on_forwad(self, doc, event): ...
        >>> try:
        ...     probe_handlers(Typo())
        ... except UnknownEvent as exc:
        ...     print(exc)
        probe Typo: on_forwad names no event; did you mean on_forward?
    """


_NAMES = (*EVENTS, END)


def probe_handlers(probe: Probe) -> dict[str, Handler]:
    """``probe``'s handler for each event it has one for (in :data:`EVENTS` order);
    raises :class:`UnknownEvent` for a callable ``on_*`` attribute that names no event
    (nor ``on_end``). Attributes that are not callable (a flag named ``on_gpu``) are
    not handlers.

    Example:
        >>> class Steps:
        ...     def on_step(self, doc, event): ...
        ...     def on_end(self, doc): ...
        >>> list(probe_handlers(Steps()))
        ['on_step']
    """
    for name in dir(probe):
        if name.startswith("on_") and name not in _NAMES and callable(getattr(probe, name)):
            raise UnknownEvent(_unknown(probe, name))
    return {n: getattr(probe, n) for n in EVENTS if callable(getattr(probe, n, None))}


def _unknown(probe: Probe, name: str) -> str:
    close = difflib.get_close_matches(name, _NAMES, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else f"the events: {', '.join(_NAMES)}"
    return f"probe {type(probe).__name__}: {name} names no event; {hint}"
