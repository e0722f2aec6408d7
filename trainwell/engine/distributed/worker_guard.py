"""Workers die with their launcher: no orphan trains on after ``kill -9`` of the launcher.

``trainwell train --nproc N`` is one launcher process (torch's elastic agent runs in it)
and N worker processes. SIGKILL cannot be caught, so a killed launcher forwards nothing:
its workers, in their own sessions, would be adopted by init and finish the run while the
user restarts it. Each worker therefore asks the kernel for a parent-death signal
(Linux ``prctl(PR_SET_PDEATHSIG)``): SIGTERM when the launcher goes, which stops the run
the graceful way (the step finishes, ``last.pt`` is saved, ``summary.json`` says
``interrupted``). A watchdog thread backs it up where prctl is missing (macOS) and makes
the end certain: once the launcher is gone, a worker still alive after
:data:`ORPHAN_GRACE_S` kills itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

# Set by the launcher for its workers: its pid, which each worker's parent must be.
LAUNCHER_PID_ENV = "TRAINWELL_LAUNCHER_PID"
# Set by the launcher: a folder where each worker leaves its one-line error, so that the
# launcher prints it once (not once per process, among torchrun's own lines).
ERRORS_ENV = "TRAINWELL_LAUNCH_ERRORS"
# After the launcher died: how long a worker may take to stop on its own before it is
# killed outright (a graceful stop of a small model takes well under a second; a loaded
# machine, or a checkpoint of a big one, takes longer).
ORPHAN_GRACE_S = 10.0
_POLL_S = 0.25
_PR_SET_PDEATHSIG = 1


def die_with_launcher() -> None:
    """In a worker of a trainwell launcher: end when the launcher ends (see the module).

    Does nothing in a process that no trainwell launcher started.

    Example:
        >>> die_with_launcher()  # not a worker: nothing happens
    """
    launcher = _launcher_pid()
    if launcher is None:
        return
    if os.getppid() != launcher:
        # Either the launcher is already gone (we were adopted before we could ask for
        # the signal), or a worker started something that inherited our environment:
        # only the launcher's own children are guarded.
        if not _alive(launcher):
            _die("the launcher ended before this worker started")
        return
    _set_parent_death_signal(signal.SIGTERM)
    # The launcher may have died between fork and prctl: then no signal will ever come.
    if os.getppid() != launcher:
        _die("the launcher ended while this worker started")
    threading.Thread(
        target=_watch, args=(launcher,), name="trainwell-launcher-watch", daemon=True
    ).start()


def launcher_gone() -> bool:
    """Is this a worker of a trainwell launcher that has ended? (Its peers are being
    stopped with it: a collective that breaks now is that stop, not the run failing.)

    Example:
        >>> launcher_gone()  # not a worker
        False
    """
    launcher = _launcher_pid()
    return launcher is not None and os.getppid() != launcher


def _launcher_pid() -> int | None:
    """The trainwell launcher this process is a worker of (``None``: not a worker, or
    the launcher itself)."""
    pid = os.environ.get(LAUNCHER_PID_ENV)
    if not pid or not pid.isdigit() or int(pid) == os.getpid():
        return None
    return int(pid)


def _set_parent_death_signal(signum: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(launcher: int) -> None:
    while os.getppid() == launcher:
        time.sleep(_POLL_S)
    # Gone. Where prctl worked, SIGTERM has come already; elsewhere send it ourselves.
    with contextlib.suppress(OSError):
        os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(ORPHAN_GRACE_S)
    _die(f"the launcher ended and this worker did not stop within {ORPHAN_GRACE_S:.0f}s")


def _die(why: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"trainwell: worker {os.getpid()}: {why}; killing it", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def report_error(message: str) -> bool:
    """In a worker of a trainwell launcher: leave ``message`` for the launcher to print
    once; False elsewhere (the caller prints it).

    Example:
        >>> report_error("data.batch_size: ...")  # not a worker
        False
    """
    folder = os.environ.get(ERRORS_ENV)
    if not folder or not os.path.isdir(folder):
        return False
    if os.environ.get(LAUNCHER_PID_ENV) != str(os.getppid()):
        return False  # not a worker itself (a command a worker ran inherits the variable)
    rank = os.environ.get("RANK", "0")
    try:
        with open(os.path.join(folder, f"rank-{int(rank):06d}.txt"), "w") as f:
            f.write(message)
    except (OSError, ValueError):
        return False
    return True


def reported_error(folder: str) -> str | None:
    """The lowest rank's error that workers left in ``folder`` (see :func:`report_error`)."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("rank-"))
        if names:
            with open(os.path.join(folder, names[0])) as f:
                return f.read().strip() or None
    except OSError:
        pass
    return None
