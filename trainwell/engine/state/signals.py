"""Graceful stop on SIGTERM / SIGINT: finish the optimizer step, save, then exit.

The first signal only sets a flag that the loop reads at step boundaries (a Python bool:
no device sync), so the checkpoint it writes is a consistent state, never one caught
halfway through ``optimizer.step()``. A second signal aborts at once, as a second
Ctrl-C should. The previous handlers come back afterwards, so a notebook keeps its own.

Code that is not the engine's (a user logger's ``flush``, a callback, a tracking server
that stopped answering) runs inside :func:`foreign`. After a signal, such a call gets
:data:`HOOK_GRACE_S` seconds to return; then it is aborted as by a second signal, and
the run ends ``interrupted`` (exit 128 + signal) instead of waiting for the hook. A
watcher thread keeps that promise even while the main thread is blocked in a system call
(a socket read): the kernel's signal reaches it through ``signal.set_wakeup_fd``, and it
sends the main thread the signal that interrupts the call. The engine's own work (a step,
a checkpoint being written) is never cut short this way.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

from trainwell.engine.distributed.worker_guard import launcher_gone

# How long code that is not the engine's may keep a requested stop waiting.
HOOK_GRACE_S = float(os.environ.get("TRAINWELL_STOP_GRACE_S", "5"))
# The stop of the run in progress in this process (foreign() reports to it).
_active: list[GracefulStop] = []


class Interrupted(KeyboardInterrupt):
    """Training stopped by a signal; ``signum`` gives the exit code 128 + signum.

    A ``KeyboardInterrupt`` subclass, so code that already handles Ctrl-C handles it.
    """

    def __init__(self, signum: int, abort: bool = False, why: str = "") -> None:
        name = signal.Signals(signum).name
        message = f"stopped by {name}"
        if abort:
            message = why or f"second {name}: aborting"
        super().__init__(message)
        self.signum = signum
        self.abort = abort  # True: raised at once, possibly mid-step


@contextlib.contextmanager
def foreign(what: str) -> Iterator[None]:
    """Around a call into code that is not the engine's (``what`` names it for the message):
    once a stop is requested, it gets :data:`HOOK_GRACE_S` seconds, then it is aborted.

    Example:
        >>> with foreign("logger Printer's flush"):
        ...     pass
    """
    stop = _active[-1] if _active else None
    if stop is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    outer = stop._foreign
    stop._foreign = (what, time.monotonic())
    try:
        yield
    finally:
        stop._foreign = outer


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
        self._foreign: tuple[str, float] | None = None  # (what, since) while in one
        self._abort_why = ""  # set by the watcher: the hook overstayed its grace
        self._watcher: _Watcher | None = None

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
            self._watcher = _Watcher.start(self)
            _active.append(self)
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self._close()
        if self.signum is not None and _peer_gone(exc):
            # Stopping, this rank's peer ended first (its hook was aborted, or it was
            # killed) and the collective it waited in broke: the stop is the news, said
            # by rank 0; not a traceback here.
            stopped = Interrupted(self.signum, abort=True, why="a peer process stopped first")
            stopped.reported = True  # type: ignore[attr-defined]
            raise stopped from None

    def _close(self) -> None:
        if self in _active:
            _active.remove(self)
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._abort_why and self._foreign is not None:
            why, self._abort_why = self._abort_why, ""
            print(f"trainwell: {why}", file=sys.stderr, flush=True)
            raise Interrupted(signum, abort=True, why=why)
        if self.signum is not None and not self._abort_why:
            raise Interrupted(signum, abort=True)
        self._abort_why = ""  # a late nudge after the hook returned: nothing to abort
        self.signum = signum

    def _overdue(self, now: float) -> str:
        """Why the current foreign call must be aborted now, or "" (watcher thread)."""
        foreign, signalled = self._foreign, self._watcher.signalled_at if self._watcher else None
        if foreign is None or signalled is None:
            return ""
        what, since = foreign
        if now - max(since, signalled) < HOOK_GRACE_S:
            return ""
        return f"{what} did not return {HOOK_GRACE_S:g}s after the stop signal: aborted"


def stopped_by_peer(exc: BaseException, stop: GracefulStop) -> BaseException:
    """``exc`` as the run's end should be told: a collective that broke while this rank
    was stopping (its peer ended first) is the stop, not a failure of the run; so is one
    that broke once this worker's launcher ended (the launcher's end stops every worker,
    and a peer may stop before this rank's own signal has been handled)."""
    if _peer_gone(exc) and (stop.signum is not None or launcher_gone()):
        signum = stop.signum or signal.SIGTERM
        return Interrupted(signum, abort=True, why="a peer process stopped first")
    return exc


def _peer_gone(exc: BaseException | None) -> bool:
    """An error of a collective (gloo, NCCL) in a process of several."""
    several = int(os.environ.get("WORLD_SIZE", "1")) > 1
    return several and isinstance(exc, RuntimeError | ConnectionError)


class _Watcher:
    """A thread told of every signal by the kernel (a wakeup fd), which aborts a foreign
    call that overstays its grace, and ends the process if even that does not land."""

    write_fd: int  # the pipe's end the kernel writes to; set by start(), which made it

    def __init__(self, stop: GracefulStop, read_fd: int, previous_fd: int) -> None:
        self.stop = stop
        self.read_fd = read_fd
        self.previous_fd = previous_fd
        self.signalled_at: float | None = None
        self.signum = int(signal.SIGTERM)
        self.closed = threading.Event()
        self.main = threading.main_thread().ident
        self.thread = threading.Thread(target=self._run, name="trainwell-stop", daemon=True)

    @classmethod
    def start(cls, stop: GracefulStop) -> _Watcher | None:
        try:
            read_fd, write_fd = os.pipe()
            os.set_blocking(write_fd, False)
            previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except (OSError, ValueError):
            return None
        watcher = cls(stop, read_fd, previous)
        watcher.write_fd = write_fd
        watcher.thread.start()
        return watcher

    def close(self) -> None:
        signal.set_wakeup_fd(self.previous_fd)
        self.closed.set()
        with contextlib.suppress(OSError):
            os.write(self.write_fd, b"\0")  # wake the thread so it sees `closed`
        self.thread.join(timeout=1.0)
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _run(self) -> None:
        aborted_at: float | None = None
        while not self.closed.is_set():
            timeout = None if self.signalled_at is None else 0.1
            ready, _, _ = select.select([self.read_fd], [], [], timeout)
            if ready and not self._read():
                return
            now = time.monotonic()
            why = self.stop._overdue(now)
            if not why:
                aborted_at = None
                continue
            if aborted_at is None:
                aborted_at = now
            elif now - aborted_at > HOOK_GRACE_S:
                self._exit(why)
            self.stop._abort_why = why
            # Interrupts the main thread's blocking call, so that its handler runs.
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_kill(self.main, self.signum)  # type: ignore[arg-type]
            time.sleep(0.5)

    def _read(self) -> bool:
        try:
            data = os.read(self.read_fd, 64)
        except OSError:
            return False
        if self.closed.is_set():
            return False
        for byte in data:
            if byte in (signal.SIGTERM, signal.SIGINT):
                self.signum = byte
                if self.signalled_at is None:
                    self.signalled_at = time.monotonic()
        return True

    def _exit(self, why: str) -> None:
        # The abort did not land (a call that retries through every interruption): end the
        # process as the signal's default action would, with its exit code.
        with contextlib.suppress(OSError, ValueError):
            print(f"trainwell: {why}; the call did not give way, exiting", file=sys.stderr,
                  flush=True)  # fmt: skip
        os._exit(128 + self.signum)
