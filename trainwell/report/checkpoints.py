"""A run's checkpoints with their step and metrics, read without importing torch.

A ``.pt`` file from ``torch.save`` is a zip whose ``*/data.pkl`` holds the state's
structure, with tensors only as references to other members. Unpickling that member
with every class replaced by an inert stub gives the plain numbers (``step``, ``epoch``,
``metrics``, ``best``) in milliseconds and runs none of the file's code, so a report
never needs torch nor trusts the file.
"""

from __future__ import annotations

import io
import pickle
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# data.pkl grows with the number of tensors, not their size; beyond this, skip the read.
_MAX_PICKLE_BYTES = 64 * 1024 * 1024
_STEP_NAME = re.compile(r"step-(\d+)")


@dataclass
class Checkpoint:
    """One checkpoint file or DCP folder, and what its state says.

    Example:
        >>> Checkpoint("last.pt", 671928, step=38).size_text
        '656 KB'
    """

    name: str
    size: int
    step: int | None = None
    epoch: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    best: dict[str, Any] = field(default_factory=dict)

    @property
    def size_text(self) -> str:
        """``0.6 MB``, or ``12 KB`` for a small model."""
        if self.size < 2**20:
            return f"{max(1, round(self.size / 2**10))} KB"
        return f"{self.size / 2**20:.1f} MB"


class _Stub:
    """Stands for any class or function named in the pickle; absorbs every call."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Stub:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Stub:
        return _Stub()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass


class _Dict(dict):
    """An OrderedDict (a state_dict) that ignores the attributes pickled with it."""

    def __setstate__(self, state: Any) -> None:
        pass


class _InertUnpickler(pickle.Unpickler):
    """Builds only plain containers and numbers; every named global is a stub."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return _Dict
        return _Stub

    def persistent_load(self, pid: Any) -> Any:
        return None  # a tensor's storage: its bytes are never needed here


def read_state(path: Path) -> dict[str, Any] | None:
    """The plain part of a torch checkpoint's state, or ``None`` when it cannot be read.

    Example:
        >>> read_state(Path("/nonexistent.pt")) is None
        True
    """
    try:
        with zipfile.ZipFile(path) as archive:
            member = next((n for n in archive.namelist() if n.endswith("/data.pkl")), None)
            if member is None or archive.getinfo(member).file_size > _MAX_PICKLE_BYTES:
                return None
            raw = archive.read(member)
        state = _InertUnpickler(io.BytesIO(raw)).load()
    except Exception:  # any damage (truncated zip, odd pickle) only hides the details
        return None
    return state if isinstance(state, dict) else None


def list_checkpoints(folder: Path, notes: list[str]) -> list[Checkpoint]:
    """Every checkpoint in ``folder`` by step (``last``/``best`` after the numbered ones)."""
    if not folder.is_dir():
        return []
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue  # a temporary of an atomic write in progress
        if entry.is_file() and entry.suffix == ".pt":
            found.append(_from_file(entry, notes))
        elif entry.is_dir():
            found.append(_from_folder(entry))
    return sorted(found, key=lambda c: (c.step is None, c.step or 0, c.name))


def _from_file(path: Path, notes: list[str]) -> Checkpoint:
    ckpt = Checkpoint(path.name, path.stat().st_size)
    state = read_state(path)
    if state is None:
        notes.append(f"checkpoints/{path.name}: its step and metrics could not be read")
        ckpt.step = _step_from_name(path.name)
        return ckpt
    ckpt.step = _int(state.get("step"))
    ckpt.epoch = _int(state.get("epoch"))
    metrics = state.get("metrics")
    if isinstance(metrics, dict):
        ckpt.metrics = {str(k): float(v) for k, v in metrics.items() if _number(v)}
    best = state.get("best")
    if isinstance(best, dict):
        ckpt.best = {str(k): v for k, v in best.items() if isinstance(v, str | int | float)}
    return ckpt


def _from_folder(path: Path) -> Checkpoint:
    """A DCP folder (FSDP): its size and the step in its name; the state stays unread."""
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return Checkpoint(path.name + "/", size, step=_step_from_name(path.name))


def _step_from_name(name: str) -> int | None:
    match = _STEP_NAME.match(name)
    return int(match.group(1)) if match else None


def _int(value: Any) -> int | None:
    return int(value) if _number(value) else None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
