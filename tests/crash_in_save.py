"""Test-only: a worker killed inside a sharded checkpoint's write, after its shards and
before its commit marker, on the launcher's first attempt: the torn folder must never be
loaded, and the restart must resume from the last committed one.

``env(name)`` is the environment of a ``trainwell train --nproc N`` subprocess whose rank 0
SIGKILLs itself while writing the folder ``name`` (``"step-20"``): the shim in
``tests/faultshim/`` installs it at every process's start-up (:func:`install_from_env`),
and it wraps :func:`trainwell.engine.checkpointing.checkpoint.save_atomic` to die when it
is about to write that folder's ``state.pt`` (the shards are written by then, the marker
comes after). The product holds no hook for it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from tests.io_faults import SHIM

VAR = "TRAINWELL_TEST_CRASH_IN_SAVE"


def env(name: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (else this process's environment) with the crash in ``name``'s write."""
    base = dict(os.environ if base is None else base)
    path = [str(SHIM), *filter(None, base.get("PYTHONPATH", "").split(os.pathsep))]
    return {**base, VAR: name, "PYTHONPATH": os.pathsep.join(path)}


def install_from_env() -> None:
    """What the subprocess shim calls at start-up: on the first attempt only (a restart,
    ``TORCHELASTIC_RESTART_COUNT`` > 0, writes the folder whole)."""
    name = os.environ.get(VAR)
    if not name or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    from trainwell.engine.checkpointing import checkpoint, sharded

    save_atomic = checkpoint.save_atomic
    torn = f".{name}.tmp"  # the folder is written under this name, swapped in when committed

    def crashing(obj: Any, path: Path, *args: Any, **kwargs: Any) -> Any:
        if Path(path).name == sharded.STATE and Path(path).parent.name == torn:
            os.kill(os.getpid(), signal.SIGKILL)
        return save_atomic(obj, path, *args, **kwargs)

    checkpoint.save_atomic = crashing  # type: ignore[assignment]
