"""How long this thread has waited for a CPU, for timings that must not depend on the
machine's load. The bottom layer of the doctor: it imports nothing of the package.

On a busy machine a thread that could run waits in the scheduler's queue, and every
wall-clock timing of its work grows by that wait. Linux counts it per thread
(``/proc/thread-self/schedstat``: time on a CPU, time queued, in ns); a timing less the
queued time inside it is what it would have been on an idle machine, for computing
(which slows) and for sleeping on files or sockets (which does not) alike.
"""

from __future__ import annotations

import os
import threading

_FDS: dict[int, int] = {}  # thread ident -> its schedstat file, kept open (-1: none)


def queued() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU since it started;
    ``0.0`` where the system does not say (then timings are taken as they are).

    Example:
        >>> a = queued(); b = queued(); 0.0 <= a <= b
        True
    """
    tid = threading.get_ident()
    fd = _FDS.get(tid)
    if fd is None:
        try:
            fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            fd = -1
        _FDS[tid] = fd
    if fd < 0:
        return 0.0
    try:
        return _queued_in(fd)
    except (OSError, ValueError, IndexError):  # the thread's file went away
        return 0.0


def _queued_in(fd: int) -> float:
    """The queued seconds a thread's open schedstat file says (its second field, in ns)."""
    # One read at offset 0 (a few microseconds): the file is made anew each time.
    return int(os.pread(fd, 64, 0).split()[1]) * 1e-9


_OTHERS: dict[str, int] = {}  # another thread's id (in /proc/self/task) -> its file


def others_queued() -> dict[str, float]:
    """Seconds each other thread of this process has spent queued for a CPU, by thread
    id; empty where the system does not say. A thread that waits for another (torch's
    intra-op threads at the end of each parallel operation) spins while that one is
    queued: the caller's CPU time grows by a busy machine's load after all.

    Example:
        >>> all(seconds >= 0.0 for seconds in others_queued().values())
        True
    """
    try:
        names = os.listdir("/proc/self/task")
    except OSError:
        return {}
    me = str(threading.get_native_id())
    out = {}
    for name in names:
        if name == me:
            continue
        fd = _OTHERS.get(name)
        try:
            if fd is None:
                fd = _OTHERS[name] = os.open(f"/proc/self/task/{name}/schedstat", os.O_RDONLY)
            out[name] = _queued_in(fd)
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            continue
    for name in [n for n in _OTHERS if n not in out]:  # ended threads: close their files
        os.close(_OTHERS.pop(name))
    return out
