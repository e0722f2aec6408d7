"""Resuming: find the checkpoint to continue from, and compare its config with today's.

``--resume auto`` takes the newest checkpoint of ``run.dir`` that loads; a newest one
that is truncated or corrupt (a crash mid-write on a filesystem without atomic rename, a
disk error) is skipped with a message, never silently. With no checkpoint at all, the
run starts from scratch, which is what a restarted job wants.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from trainwell.engine import checkpoint as ckpt
from trainwell.errors import UserError

# Changing these would make the saved state meaningless for the new run.
_INCOMPATIBLE = ("optim.name",)
# Not part of what is trained: differences here are not worth a report.
_IGNORED = ("run.dir", "run.name")


def candidates(run_dir: Path) -> list[Path]:
    """Checkpoints of a run directory, newest first (last.pt, step-N.pt; not best.pt)."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    files = [p for p in folder.iterdir() if p.name == "last.pt" or ckpt.STEP_FILE.match(p.name)]
    return sorted(files, key=lambda p: p.stat().st_mtime_ns, reverse=True)


def find(run_dir: Path, say: Any = print) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint of ``run_dir`` that loads, with its state; ``None`` if none.

    Unusable checkpoints are reported through ``say`` and skipped.
    """
    for path in candidates(run_dir):
        try:
            return path, ckpt.load_checkpoint(path)
        except UserError as exc:
            say(f"skipping unusable checkpoint: {exc}")
    return None


def remove_stale_temporaries(run_dir: Path) -> None:
    """Delete temporary files a killed process left mid-write (they are never loaded)."""
    folder = run_dir / "checkpoints"
    if folder.is_dir():
        for tmp in folder.glob(".*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


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
