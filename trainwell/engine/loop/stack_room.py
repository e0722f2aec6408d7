"""Room on CPython's frame stack for the training loop, wherever ``fit`` is called from.

Since 3.11, CPython keeps each thread's Python frames in chunks of a data stack, 16 KiB
each (``DATA_STACK_CHUNK_SIZE`` in ``Python/pystate.c``). A call whose frame does not fit
in what is left of the current chunk gets a new chunk (an ``mmap``), and the chunk is
returned (``munmap``) as soon as the frame at its base returns. So when the loop's
per-step calls happen to cross a chunk's end, which depends only on how deep the caller
was (a notebook, a Hydra app, a CLI wrapper, a test), every step pays an ``mmap``, page
faults and a ``munmap``, several times over. Measured here on the tiny MLP of
``benchmarks/overhead.py``: 0.58-0.71 of a hand-written loop's steps/s at some call depths,
0.90 at others, with nothing else changed (``benchmarks/stack_depth.py``).

:func:`call_with_room` calls a function through a frame too large for any 16 KiB chunk:
CPython gives that frame a chunk of its own, 128 KiB, and the function's frames and every
call below them live in the 70 KiB left after it, a chunk that stays for as long as the
function runs. The per-step calls then never cross a chunk's end, whatever the depth.
The frame's unused slots are never written; the cost is one 128 KiB mapping per call.

Elsewhere (CPython before 3.11 allocates frames one by one; other interpreters), the call
is a plain call.

Example:
    >>> call_with_room(sorted, [3, 1, 2], reverse=True)
    [3, 2, 1]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Slots (8 bytes each) of the calling frame: more than a 16 KiB chunk holds (2,048), and
# just over the size for which CPython doubles the new chunk to 128 KiB (it asks for the
# frame plus 1,000 slots): 7,300 slots (57 KiB) leave about 70 KiB below it.
ROOM_SLOTS = 7300


def _room(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    return fn(*args, **kwargs)


def _widen(code: Any, slots: int) -> Any:
    """``code`` with ``slots`` more evaluation-stack slots (its frame grows by as many)."""
    return code.replace(co_stacksize=code.co_stacksize + slots)


WIDE = sys.implementation.name == "cpython" and sys.version_info >= (3, 11)
if WIDE:
    _room.__code__ = _widen(_room.__code__, ROOM_SLOTS)


def call_with_room(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, its calls in a frame-stack chunk of their own (see the module)."""
    return _room(fn, args, kwargs)
