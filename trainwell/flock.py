"""Advisory file locks (``flock``): the run lock's primitive, and the probe of a run's life.

A run holds ``RUN/.lock`` (see :mod:`trainwell.engine.run_dir.run_lock`); the kernel drops the
lock when the holder ends, SIGKILL included. So whether a run is alive is asked of the
lock (:func:`lock_state`), not of the pid written in the file, which is soon another
process's. Standard library only: the report and the runs listing use it too.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are not guarded there
    fcntl = None  # type: ignore[assignment]

# A lock probe (lock_state) holds the lock for microseconds: a run that starts just then
# tries again briefly rather than being turned away.
TRIES = 5
_RETRY_S = 0.05


def flock(fd: int, mode: int, tries: int = 1) -> bool:
    """Take ``mode`` (``fcntl.LOCK_EX`` / ``LOCK_SH``) on ``fd`` without blocking, trying
    ``tries`` times 50 ms apart; False when another holder keeps it."""
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
        >>> fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT)
        >>> flock(fd, fcntl.LOCK_EX)
        True
        >>> lock_state(folder)
        'held'
        >>> os.close(fd)  # as the holder's end does
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
        if not flock(fd, fcntl.LOCK_SH):
            return "held"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "free"
    except OSError:
        return "unknown"
    finally:
        os.close(fd)
