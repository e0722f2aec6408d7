"""The scan for tensors kept across steps, shared by the ``graph-retained`` and
``tensor-accumulation`` probes: when to scan (a fixed schedule of steps), what (the
user's frames and the models' attributes, found once per step for both probes), and
how to count a container's items without reading all of them at every scan.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch

from trainwell.doctor.events import Reporter, StepEvent, UpdateEvent
from trainwell.doctor.holders import Holder, attributes, holders
from trainwell.doctor.sites import is_user_file

DENSE = 9  # every step up to here: enough observations for every rule
# Items that hold no tensor, passed over before the test (a list of every step's loss
# as a float is the common long list).
_PLAIN = (float, int, bool, str, bytes, type(None))
EVERY = 256  # then every this many steps (and at the powers of two)


def scheduled(step: int) -> bool:
    """Whether optimizer step ``step`` is scanned: every one of the first ``DENSE``
    (most leaks show within a few steps), then the powers of two and every ``EVERY``-th.
    A holder that grows step over step grows between any two scans too, so sparse
    scans see a leak as surely, later, and never by chance (one that grows every few
    steps, such as a list appended to at each logging step, only by sparse scans); the
    scan, whose cost grows with the user's variables, then costs a fraction of a step.

    Example:
        >>> [s for s in range(1, 1100) if scheduled(s)]
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 32, 64, 128, 256, 512, 768, 1024]
    """
    return step <= DENSE or not step & (step - 1) or not step % EVERY


def next_scheduled(step: int) -> int:
    """The first scanned step after ``step``.

    Example:
        >>> next_scheduled(3), next_scheduled(9), next_scheduled(300), next_scheduled(1024)
        (4, 16, 512, 1280)
    """
    if step < DENSE:
        return step + 1
    power = 1 << step.bit_length()  # the next power of two
    return min(power, (step // EVERY + 1) * EVERY)


def sleep_until_scheduled(doc: Reporter, probe: Any, step: int, also: int | None = None) -> None:
    """Stop hearing steps until the next scanned one (or ``also``, if sooner): between
    scans a probe costs the training nothing. Never for a single step: waking costs
    more than a call."""
    wake = next_scheduled(step) if also is None else min(next_scheduled(step), also)
    if wake > step + 1:
        doc.unsubscribe(probe, "on_step", until=wake)


def holders_at(doc: Reporter, event: StepEvent | UpdateEvent) -> list[tuple[str, Holder]]:
    """What may hold tensors across steps at this step: the user's frames, and the
    models' attributes (the engine runs a user's model from its own frames). Found once
    per step, for every probe that asks."""
    found = event.memo.get("holders")
    if found is None:
        scanned: set[int] = set()  # objects whose attributes were looked at
        models = [getattr(m, "module", m) for m in doc.models()]  # (inside DDP)
        found = holders(event.frame, scanned, _user_modules(doc, models))
        for model in models:
            if id(model) not in scanned:
                found += attributes(type(model).__name__, model, scanned)
        event.memo["holders"] = found
    return found


def _user_modules(doc: Reporter, models: list[Any]) -> tuple[dict, ...]:
    """The variables of the user's modules whose code ran this step, the engine's
    frames in between: those that called a model (a step function's) and those that
    define the models."""
    found = {id(r.globals): r.globals for r in doc.step_forwards if is_user_file(r.file)}
    for model in models:
        module = sys.modules.get(type(model).__module__)
        file = getattr(module, "__file__", None)
        if file and is_user_file(file):
            found.setdefault(id(module.__dict__), module.__dict__)
    return tuple(found.values())


class ItemCounts:
    """Items of each holder's container that satisfy a test, counted incrementally for
    lists: a list kept across steps grows by appends, so after the first count only the
    new items are read (a list of every step's loss would cost more at every scan).

    A list is taken as the same, grown by appends, when its identity holds and its item
    last counted is still in place; else it is counted anew.

    :meth:`renewed` tells a container that keeps what it was given (its oldest tensor
    stays) from one emptied at a regular point and filled again (``del lst[:]``,
    ``lst.clear()``, ``lst = []`` each episode, a bounded buffer): the second holds no
    step's tensors beyond the point where it is emptied, whatever its length.
    """

    def __init__(self, test: Callable[[Any], bool]) -> None:
        self.test = test
        # path -> (id of the list, its length, id of its last item then, the count)
        self.lists: dict[str, tuple[int, int, int, int]] = {}
        # path -> a weak reference to the container's oldest tensor at the last look
        self.firsts: dict[str, Any] = {}

    def count(self, path: str, value: Any) -> int | None:
        """How many items of ``value`` pass the test (``None``: not a container)."""
        if type(value) is not list:
            self.lists.pop(path, None)
            items = value.values() if isinstance(value, dict) else value
            try:
                return sum(1 for v in items if not isinstance(v, _PLAIN) and self.test(v))
            except TypeError:
                return None
        start, count = 0, 0
        known = self.lists.get(path)
        if known is not None:
            ident, length, last, counted = known
            if ident == id(value) and len(value) >= length and (
                not length or id(value[length - 1]) == last
            ):
                start, count = length, counted
        count += sum(1 for v in value[start:] if not isinstance(v, _PLAIN) and self.test(v))
        self.lists[path] = (id(value), len(value), id(value[-1]) if value else 0, count)
        return count

    def renewed(self, path: str, value: Any) -> bool:
        """Whether the container's oldest tensor is another than at the last look: it
        was emptied since (or turned over) and holds newer tensors only."""
        first = _first_tensor(value)
        ref = self.firsts.get(path)
        self.firsts[path] = weakref.ref(first) if first is not None else None
        # A weak reference: holding the item would keep its graph alive after the user's
        # code let it go. Dead, or alive but no longer first: renewed.
        return ref is not None and ref() is not first

    def forget(self, seen: set[str]) -> None:
        """Drop the holders no longer found."""
        for known in (self.lists, self.firsts):
            for path in [p for p in known if p not in seen]:
                del known[path]


def _first_tensor(value: Any) -> Any:
    """The oldest tensor a container holds: its first item's, looking a level into a
    small tuple, list or dict item (``SavedAction(log_prob, value)``); ``None`` if
    the first few items hold none."""
    items = value.values() if isinstance(value, dict) else value
    try:
        head = [v for _, v in zip(range(4), items)]
    except TypeError:
        return None
    for item in head:
        if isinstance(item, dict):
            item = next(iter(item.values()), None)
        elif isinstance(item, (tuple, list)):
            item = next((t for t in item[:4] if isinstance(t, torch.Tensor)), None)
        if isinstance(item, torch.Tensor):
            return item
    return None
