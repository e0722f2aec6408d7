"""One process per run directory: an OS lock on ``RUN/.lock``, held while the run lives.

Two trainings writing one run directory interleave their metrics rows and overwrite each
other's checkpoints. The lock is ``flock`` on a file in the folder: the kernel drops it
when the process ends, however it ends (SIGKILL included), so a crashed run never leaves
a stale lock behind. The file holds the holder's pid, for the refusal's message.

Whether a run is alive is asked of the lock too (:func:`lock_state`), never of the pid in
the file (a pid is reused; a lock dies with its holder).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from pathlib import Path

from trainwell.engine.rundir import write_error
from trainwell.errors import UserError

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are not guarded there
    fcntl = None  # type: ignore[assignment]


class RunLock:
    """The held lock of one run directory.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> lock = RunLock.acquire(folder)
        >>> (folder / ".lock").read_text() == str(os.getpid())
        True
        >>> lock.release()
    """

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    @classmethod
    def acquire(cls, folder: Path) -> RunLock:
        """Take the lock of ``folder`` (created if missing), or refuse with the holder's pid."""
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise UserError(f"run.dir: cannot use {folder}: {exc.strerror}") from None
        if fcntl is None:
            return cls(fd)
        try:
            locked = _flock(fd, fcntl.LOCK_EX, tries=_TRIES)
        except OSError:  # a file system without locks: as good as held (never share)
            locked = False
        if not locked:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UserError(
                f"run.dir: {folder} is in use by another trainwell process (pid {holder}); "
                "wait for it to end, or choose another run.dir"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
        except OSError as exc:  # a full disk: nothing of the run could be written anyway
            os.close(fd)
            with contextlib.suppress(OSError):
                (folder / ".lock").unlink()
            raise write_error(folder / ".lock", exc) from None
        return cls(fd)

    @classmethod
    def try_acquire(cls, folder: Path) -> RunLock | None:
        """The lock of ``folder``, or None when a live process holds it (or it cannot be
        taken at all): the caller then writes nothing there.

        Example:
            >>> import tempfile
            >>> folder = Path(tempfile.mkdtemp())
            >>> first = RunLock.try_acquire(folder)
            >>> RunLock.try_acquire(folder) is None  # another holder: refused
            True
            >>> first.release()
        """
        try:
            return cls.acquire(folder)
        except UserError:
            return None

    def __del__(self) -> None:
        # A run that ends without finish() (an exception before the loop) lets go too.
        self.release()

    def release(self) -> None:
        """Let go of the lock (the process's end does it too)."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


# A lock probe (lock_state) holds the lock for microseconds: a run that starts just then
# tries again briefly rather than being turned away.
_TRIES = 5
_RETRY_S = 0.05


def _flock(fd: int, mode: int, tries: int = 1) -> bool:
    for attempt in range(tries):
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
        if attempt + 1 < tries:
            time.sleep(_RETRY_S)
    return False


def lock_state(folder: Path) -> str:
    """``"held"`` (a live process has the run), ``"free"`` (none has: it ended, however it
    ended), or ``"unknown"`` (no lock file, or one that cannot be read).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> lock_state(folder)
        'unknown'
        >>> lock = RunLock.acquire(folder)
        >>> lock_state(folder)
        'held'
        >>> lock.release()
        >>> lock_state(folder)
        'free'
    """
    if fcntl is None:
        return "unknown"
    try:
        fd = os.open(Path(folder) / ".lock", os.O_RDONLY)
    except OSError:
        return "unknown"
    try:
        # A shared lock: it conflicts only with a holder's exclusive one; let go at once.
        if not _flock(fd, fcntl.LOCK_SH):
            return "held"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "free"
    except OSError:
        return "unknown"
    finally:
        os.close(fd)
