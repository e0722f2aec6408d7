"""Graceful stop on SIGTERM / SIGINT: finish the optimizer step, save, then exit.

The first signal only sets a flag that the loop reads at step boundaries (a Python bool:
no device sync), so the checkpoint it writes is a consistent state, never one caught
halfway through ``optimizer.step()``. A second signal aborts at once, as a second
Ctrl-C should. The previous handlers come back afterwards, so a notebook keeps its own.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType


class Interrupted(KeyboardInterrupt):
    """Training stopped by a signal; ``signum`` gives the exit code 128 + signum.

    A ``KeyboardInterrupt`` subclass, so code that already handles Ctrl-C handles it.
    """

    def __init__(self, signum: int, abort: bool = False) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"second {name}: aborting" if abort else f"stopped by {name}")
        self.signum = signum
        self.abort = abort  # True: raised at once, possibly mid-step


class GracefulStop:
    """Context manager that turns SIGTERM and SIGINT into a flag, then a hard abort.

    Example:
        >>> with GracefulStop() as stop:
        ...     for step in range(3):
        ...         if stop.requested:
        ...             break
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def raise_if_requested(self) -> None:
        """Called at a step boundary: stop there if a signal came."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    def __enter__(self) -> GracefulStop:
        # Signal handlers can only be set from the main thread; elsewhere (a thread of a
        # notebook server) the default behaviour stays.
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise Interrupted(signum, abort=True)
        self.signum = signum
