"""Resuming: find the checkpoint to continue from, and compare its config with today's.

``--resume auto`` takes the newest checkpoint of ``run.dir`` that loads (``last.pt``,
``step-N.pt`` and ``best.pt`` alike: a torn ``last.pt`` beside a good ``best.pt`` resumes
from the best one, never from scratch over it); a newest one that is truncated or
corrupt (a crash mid-write on a filesystem without atomic rename, a disk error) is
skipped with a message, never silently; so is a sharded folder with a damaged shard.
With no checkpoint at all, the run starts from scratch, which is what a restarted job
wants; with checkpoints that are all damaged it stops, leaving them for the user to judge.
A checkpoint that cannot be *read* (no permission, a disk error) is never skipped: it may
be whole, and going past it would write over it. That stops with one line naming the
file and the errno, before anything is written.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

import torch

from trainwell.engine.checkpointing import checkpoint as ckpt
from trainwell.engine.checkpointing import sharded
from trainwell.errors import UserError

# Changing these would make the saved state meaningless for the new run.
_INCOMPATIBLE = ("optim.name",)
# Not part of what is trained: differences here are not worth a report.
_IGNORED = ("run.dir", "run.name")


def candidates(run_dir: Path) -> list[Path]:
    """Checkpoints of a run directory, newest first (last.pt, step-N.pt, best.pt, and
    sharded folders: last/, step-N/, best/, and a ``.NAME.tmp`` a crash left).

    best comes last among checkpoints written at the same instant: it is written beside
    last at an epoch's end, with the same state.
    """
    folder = run_dir / "checkpoints"
    try:
        if not folder.is_dir():
            return []
        found = [p for p in folder.iterdir() if _is_checkpoint_name(p.name)]
    except OSError as exc:
        raise ckpt.read_error(folder, exc, what="checkpoint folder") from None
    return sorted(found, key=lambda p: (_written(p), not _base(p.name).startswith("best")),
                  reverse=True)  # fmt: skip


def _base(name: str) -> str:
    # ".last.tmp" (a sharded folder not yet swapped into place) is a "last".
    if name.startswith(".") and name.endswith((".tmp", ".old")):
        return name[1:-4]
    return name


def _is_checkpoint_name(name: str) -> bool:
    base = _base(name)
    if base.endswith(".pt") and name.startswith("."):
        return False  # a file save_atomic had not finished
    return base.removesuffix(".pt") in ("last", "best") or bool(ckpt.STEP_FILE.match(base))


def _torn_tmp(path: Path) -> bool:
    # A sharded folder a killed save left half-written: never a checkpoint (it is removed
    # when the run reopens). Said when skipped, but a run with nothing else starts afresh.
    return path.name.startswith(".") and not (path / sharded.MARKER).exists()


def _written(path: Path) -> int:
    """When the checkpoint was completed: a folder's commit marker, else its own time."""
    marker = path / sharded.MARKER
    try:
        return (marker if marker.exists() else path).stat().st_mtime_ns
    except FileNotFoundError:  # removed meanwhile (rotation by another run)
        return 0
    except OSError as exc:
        raise ckpt.read_error(path, exc) from None


def find(run_dir: Path, say: Any = print) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint of ``run_dir`` that loads, with its state; ``None`` if none.

    Damaged checkpoints are reported through ``say`` and skipped; if every one is
    damaged, :class:`UserError` (starting from scratch would write over them). One that
    cannot be read raises :class:`~trainwell.engine.checkpointing.checkpoint.Unreadable`, never
    skipped.
    """
    skipped: list[Path] = []
    for path in candidates(run_dir):
        try:
            return path, load_resumable(path)
        except ckpt.Unskippable:
            raise
        except UserError as exc:
            say(f"skipping unusable checkpoint: {exc}")
            if not _torn_tmp(path):
                skipped.append(path)
    if skipped:
        names = ", ".join(p.name for p in skipped[:4]) + (", ..." if len(skipped) > 4 else "")
        raise UserError(
            f"no checkpoint of {run_dir} can be resumed: all {len(skipped)} are damaged "
            f"({names}; see above); move them out of {run_dir / 'checkpoints'} to start from "
            "scratch, or start a new run"
        )
    return None


def run_of(path: Path) -> Path | None:
    """The run directory that ``--resume PATH`` names, if PATH is one (or its
    ``checkpoints/``), rather than one checkpoint.

    Example:
        >>> run_of(Path("no/such/run")) is None
        True
    """
    try:
        if not path.is_dir() or sharded.is_folder(path):
            return None
        if (path / "checkpoints").is_dir():
            return path
        if path.name == "checkpoints":
            return path.parent
    except OSError as exc:
        raise ckpt.read_error(path, exc, what="run directory") from None
    return None


def version_note(path: Path, state: dict[str, Any], now: dict[str, str]) -> str | None:
    """One line when the checkpoint was written by other versions of trainwell or torch.

    Example:
        >>> note = version_note(Path("last.pt"), {"versions": {"torch": "2.1"}}, {"torch": "2.2"})
        >>> note.split(":")[0]
        'checkpoint last.pt was written by torch 2.1 (this is torch 2.2)'
    """
    saved = state.get("versions")
    if not isinstance(saved, dict):
        return None
    differ = [k for k in now if k in saved and str(saved[k]) != now[k]]
    if not differ:
        return None
    then = " and ".join(f"{k} {saved[k]}" for k in differ)
    here = ", ".join(f"{k} {now[k]}" for k in differ)
    return (
        f"checkpoint {path} was written by {then} (this is {here}): resuming; a continuation "
        "bit-identical to an uninterrupted run is promised only on the same versions"
    )


# What a resumable checkpoint holds, and the type of each; anything else is refused
# before any of it is used (a crafted or foreign file must not half-restore a run).
_SCHEMA: dict[str, type] = {
    "model": dict,
    "optimizer": dict,
    "scheduler": dict,
    "step": int,
    "epoch": int,
    "data": dict,
    "early_stop": dict,
    "config": dict,
    "rng": dict,
}


def load_resumable(path: Path) -> dict[str, Any]:
    """A checkpoint that holds a whole training state, checked against its schema.

    Raises :class:`UserError` naming the file and the first thing wrong: a key missing
    (a weights-only file), a value of the wrong type, weights that are not dense tensors.
    """
    state = sharded.load_state(path) if path.is_dir() else ckpt.load_checkpoint(path)
    for key, kind in _SCHEMA.items():
        if key not in state:
            raise UserError(
                f"checkpoint {path} cannot be resumed: it has no {key!r} (a weights-only file "
                "holds no training state to continue)"
            )
        value = state[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise UserError(
                f"checkpoint {path} is malformed: {key!r} is a {type(value).__name__}, "
                f"expected a {kind.__name__}"
            )
    for name, tensor in state["model"].items():
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            shown = type(tensor).__name__ if not isinstance(tensor, torch.Tensor) else tensor.layout
            raise UserError(
                f"checkpoint {path} is malformed: weight {name!r} is {shown}, not a dense tensor"
            )
    if not isinstance(state["data"].get("steps_into_epoch"), int):
        raise UserError(f"checkpoint {path} is malformed: no data position (steps_into_epoch)")
    return state


def remove_stale_temporaries(run_dir: Path) -> None:
    """Delete temporary files a killed process left mid-write (they are never loaded),
    and torn sharded folders (no commit marker)."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return
    for tmp in [*folder.glob(".*.tmp"), *folder.glob(".*.old")]:
        if not tmp.is_dir():
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        elif not (tmp / sharded.MARKER).exists() or (folder / _base(tmp.name)).exists():
            shutil.rmtree(tmp, ignore_errors=True)


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ, as ``key: old -> new`` lines.

    Raises :class:`UserError` for a change the saved state cannot follow.
    """
    changes = []
    for key in sorted(set(_flatten(saved)) | set(_flatten(current))):
        if key.startswith(_IGNORED):
            continue
        old, new = _flatten(saved).get(key), _flatten(current).get(key)
        if old == new:
            continue
        if key in _INCOMPATIBLE:
            raise UserError(
                f"{key} changed from {old!r} to {new!r} since the checkpoint; its state cannot "
                "carry over. Start a new run (another run.dir) instead of resuming"
            )
        changes.append(f"{key}: {old!r} -> {new!r}")
    return changes


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        # kwargs dicts are compared whole: they are one setting.
        if isinstance(value, dict) and not prefix:
            flat.update(_flatten(value, f"{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def restore(
    checkpointer: Any, path: Path, state: dict[str, Any], say: Any = print
) -> None:
    """Load a checkpoint's ``state`` into the run's ``checkpointer``; the config changes
    since it was written are one line each, and what its schema check could not see (a
    malformed state) is one line too."""
    try:
        for change in config_changes(state["config"], checkpointer.config_dict):
            say(f"config changed since the checkpoint: {change}")
        checkpointer.load_state_dict(state, path)
    except UserError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as exc:
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        raise UserError(f"checkpoint {path} is malformed ({detail})") from None
