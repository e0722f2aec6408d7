"""The launcher's part in the run directory of ``--nproc N``: claimed before, settled after.

The workers own the run (rank 0 holds its lock, ``RUN/.lock``, and writes its files). The
launcher touches the folder only while it holds that lock itself: before the launch, to
refuse a run that is live or complete (one line, once, before any worker starts) and to
create the folder; after a failed launch, to say ``failed`` in a summary left
``running`` by workers that were killed outright. A launch turned away because another
process holds the run never writes there: that run is alive and its files are its own.
"""

from __future__ import annotations

from pathlib import Path

from trainwell.engine.run.run_files import discard_unstarted, mark_failed
from trainwell.engine.run_dir.directory import RunDir
from trainwell.engine.run_dir.run_lock import RunLock


def claim_run_dir(path: Path, fresh: bool) -> None:
    """Refuse ``path`` if another process holds it, or (``fresh``) if it holds a run;
    create it for a fresh run. The lock is let go before the workers start (rank 0 takes it).
    """
    if not fresh and not path.exists():
        return  # --resume auto on a first launch: the workers create it
    made = not path.exists()
    lock = RunLock.acquire(path)  # refuses a live run, naming its pid
    try:
        if fresh:
            RunDir.create(path)  # refuses a folder that holds a run
    except BaseException:
        if made:
            discard_unstarted(path)
        raise
    finally:
        lock.release()


def settle_failed_launch(path: Path, made: bool, cause: str) -> None:
    """After workers failed: remove a folder they never started, or mark a summary they
    left ``running`` as failed; only with the run's lock (nothing if another holds it)."""
    if not path.is_dir():
        return
    lock = RunLock.try_acquire(path)
    if lock is None:
        return  # the run is someone else's, and alive
    try:
        if made:  # refused before the run began: nothing left that looks like a run
            discard_unstarted(path)
        mark_failed(path, cause)
    finally:
        lock.release()
