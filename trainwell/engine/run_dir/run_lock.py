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
import os
from pathlib import Path

from trainwell.engine.run_dir.directory import refuse_dangling, write_error
from trainwell.errors import UserError
from trainwell.flock import TRIES, fcntl, flock, lock_state

__all__ = ["RunLock", "lock_state"]


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
        refuse_dangling(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise UserError(f"run.dir: cannot use {folder}: {exc.strerror}") from None
        if fcntl is None:
            return cls(fd)
        try:
            locked = flock(fd, fcntl.LOCK_EX, tries=TRIES)
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
