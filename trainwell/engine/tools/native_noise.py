"""Lines the profiler's C++ side prints to stderr that tell the user nothing: Kineto's
``USDT: ... profiler_start`` / ``profiler_stop`` trace points and the CPU allocator's
warning that a block allocated before profiling started will have no deallocation event.

They are written by C++ straight to file descriptor 2, past ``sys.stderr``, so they are
caught there: for the profiled window, fd 2 goes to a temporary file, and what it caught
is written back without those lines (an unexpected line, a real error, still shows, and
nothing is lost if the window ends in an exception).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from typing import Any

NOISE = re.compile(
    r"^(USDT:.*profiler_(start|stop)|\[W\d{4} [\d:.]+ .*CPUAllocator\.cpp:\d+\] Memory block "
    r"of unknown size was allocated before the profiling started.*)$"
)


def drop_noise(text: str) -> str:
    """``text`` without the profiler's noise lines.

    Example:
        >>> drop_noise("USDT:2026-12-02 01:35:25 1:1 SyncActivityProfilerHandler.cpp:52] "
        ...            "profiler_start\\nreal warning\\n")
        'real warning\\n'
    """
    return "".join(ln for ln in text.splitlines(keepends=True) if not NOISE.match(ln.rstrip()))


class NoiseFilter:
    """Between :meth:`open` and :meth:`close`, fd 2 goes to a temporary file; ``close``
    writes back what it caught without the profiler's noise lines. Safe to close twice,
    and a no-op where fd 2 cannot be duplicated."""

    def __init__(self) -> None:
        self._saved: int | None = None
        self._caught: Any = None

    def open(self) -> None:
        if self._saved is not None:
            return
        try:
            saved = os.dup(2)
        except OSError:  # no fd 2 (a detached process): nothing to hide
            return
        sys.stderr.flush()
        # Held open across open() and close(): the window is not one block of code.
        self._caught = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115
        os.dup2(self._caught.fileno(), 2)
        self._saved = saved

    def close(self) -> None:
        if self._saved is None:
            return
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._saved = None
        caught, self._caught = self._caught, None
        caught.seek(0)
        kept = drop_noise(caught.read().decode("utf-8", errors="replace"))
        caught.close()
        if kept:
            sys.stderr.write(kept)
            sys.stderr.flush()

