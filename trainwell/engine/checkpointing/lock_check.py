"""Is a run directory's lock held? Asked before ``--resume`` reads or says anything.

:class:`~trainwell.engine.run_dir.run_lock.RunLock` takes the lock only once the resume point is
known, after the checkpoints are read; a run that another process holds must be refused
first, before "resuming from ..." or any other line about its checkpoints. The check takes
a *shared* lock for an instant: checks from several ranks never refuse each other, while
the holder's exclusive lock refuses them all. It creates nothing (no ``.lock`` file: no
lock).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from trainwell.errors import UserError

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are not guarded there
    fcntl = None  # type: ignore[assignment]


def refuse_if_held(folder: Path) -> None:
    """Raise the lock's own one-line refusal if another process holds ``folder``'s lock.

    Example:
        >>> import tempfile
        >>> refuse_if_held(Path(tempfile.mkdtemp()))  # no lock file: nothing to refuse
    """
    if fcntl is None:
        return
    try:
        fd = os.open(folder / ".lock", os.O_RDONLY)
    except OSError:
        return  # no lock file (or none readable): RunLock.acquire decides
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            raise UserError(
                f"run.dir: {folder} is in use by another trainwell process (pid {holder}); "
                "wait for it to end, or choose another run.dir"
            ) from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
