"""SIGINT and SIGTERM end a watched script but not its report.

Under plain Python, Ctrl-C raises ``KeyboardInterrupt`` in the script and SIGTERM kills
the process outright. Under ``trainwell doctor`` both end the script by an exception
raised where it runs (a training step, a ``time.sleep``, a DataLoader wait), so the
runner still prints the findings and writes ``--json``, then exits 128 + the signal
number, as Python and the shells do. A script that catches ``KeyboardInterrupt`` itself
keeps doing so (SIGINT still raises one); SIGTERM raises :class:`Terminated`, which a
script's ``except Exception`` or ``except KeyboardInterrupt`` does not swallow.

The script's own handlers win: one it installs replaces the doctor's for that signal.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

# What signal.signal takes and returns (None: a handler set outside Python).
_Handler = Callable[[int, FrameType | None], Any] | int | None


class Terminated(BaseException):
    """Raised in the watched script by SIGTERM (a BaseException, as StopTraining is)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class SignalWatch:
    """Which signal stopped the script, if one did; the handlers while it runs.

    Example:
        >>> with SignalWatch() as watch:
        ...     pass
        >>> watch.signum is None
        True
    """

    def __init__(self) -> None:
        self.signum: int | None = None  # the first SIGINT / SIGTERM received
        self._previous: dict[int, _Handler] = {}

    def __enter__(self) -> SignalWatch:
        # Handlers can only be set from the main thread (a notebook's worker thread keeps
        # Python's defaults). A SIGINT ignored on purpose (nohup, a background job)
        # stays ignored.
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
                self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._interrupt)
            self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._terminate)
        return self

    def __exit__(self, *exc: object) -> None:
        # Back to the previous handlers before the report is built: a second Ctrl-C
        # while it is written then stops the doctor itself, as a user expects.
        for sig, handler in self._previous.items():
            if handler is not None:  # None: set outside Python, and cannot be put back
                signal.signal(sig, handler)
        self._previous.clear()

    def _interrupt(self, signum: int, frame: FrameType | None) -> None:
        self.signum = self.signum or signum
        raise KeyboardInterrupt

    def _terminate(self, signum: int, frame: FrameType | None) -> None:
        self.signum = self.signum or signum
        raise Terminated(signum)
