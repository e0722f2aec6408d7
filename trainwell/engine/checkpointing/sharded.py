"""Sharded checkpoints (``dist.strategy=fsdp``): ``torch.distributed.checkpoint`` folders.

``checkpoints/last/`` (``best/``, ``step-N/``) holds the model's and the optimizer's
state written by every rank in parallel, each its own shards (``__R_0.distcp``) with
DCP's ``.metadata``, then ``state.pt`` (everything else, as in a ``.pt`` checkpoint:
scheduler, loop, every rank's RNG, config; rank 0 writes it), then the commit marker
``.committed``, last. A folder without its marker is torn and never loaded.

A folder is written as ``.NAME.tmp`` and swapped into place once committed, so the
previous ``NAME`` stays whole until then; a crash between the two renames leaves the
committed ``.NAME.tmp``, which :func:`trainwell.engine.checkpointing.resume.candidates` also offers.
Loading goes through DCP, which reshards: a checkpoint written by 2 processes loads on
1 or 4, sharded or not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainwell.engine.checkpointing import checkpoint as ckpt
from trainwell.engine.checkpointing import shard_check
from trainwell.errors import UserError

MARKER = ".committed"
STATE = "state.pt"


def save(
    folder: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    extra: dict[str, Any] | None,
    is_main: bool,
    barrier: Any,
) -> str | None:
    """Write ``folder`` (a collective: every rank calls it); returns this rank's error.

    ``extra`` (rank 0's) is the rest of the state; ``barrier()`` waits for every rank.
    An error (a full disk) leaves the previous ``folder`` as it was.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    tmp = folder.parent / f".{folder.name}.tmp"
    error = None
    if is_main:
        shutil.rmtree(tmp, ignore_errors=True)  # a torn one from a killed run
        tmp.mkdir(parents=True)
    barrier()
    try:
        model_state, optim_state = get_state_dict(model, optimizer)
        with _one_process_quiet():
            dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=tmp)
        if is_main:
            ckpt.save_atomic({**(extra or {}), "model": {}, "optimizer": {}, "sharded": True},
                             tmp / STATE)  # fmt: skip
            _write_marker(tmp)
            _swap(tmp, folder)
    except _failures() as exc:
        error = _error_text(exc)
        if is_main:  # DCP fails on every rank at once: no rank still writes into it
            shutil.rmtree(tmp, ignore_errors=True)
    return error


def load_state(folder: Path) -> dict[str, Any]:
    """The non-sharded part of a committed folder (``state.pt``), its shards checked.

    Raises :class:`UserError` naming the folder for a torn one (no commit marker), one
    whose shard files are missing, cut short or not what its metadata describes, and
    :class:`~trainwell.engine.checkpointing.checkpoint.Unreadable` for one the OS will not let be
    read.
    """
    try:
        if not folder.is_dir():
            raise UserError(f"checkpoint {folder} does not exist")
        if not (folder / MARKER).is_file():
            raise UserError(_no_marker(folder))
    except OSError as exc:
        raise ckpt.read_error(folder, exc) from None
    shard_check.check_shards(folder)
    state = ckpt.load_checkpoint(folder / STATE)
    state["model"], state["optimizer"] = {}, {}
    return state


def _no_marker(folder: Path) -> str:
    written = any((folder / name).exists() for name in (".metadata", STATE))
    if not written and not any(folder.glob("*.distcp")):
        return (
            f"checkpoint {folder} is a folder, not a checkpoint (no .metadata, no {STATE}); "
            "--resume takes a checkpoint file, a sharded checkpoint folder or a run directory"
        )
    return (
        f"checkpoint {folder} is torn: it has no commit marker ({MARKER}), the write did not finish"
    )


def missing_shards(folder: Path) -> list[str]:
    """Files DCP's metadata refers to that are not in ``folder``."""
    try:
        metadata = shard_check.read_metadata(folder)
    except UserError:
        return [".metadata"]
    wanted = {info.relative_path for info in (metadata.storage_data or {}).values()}
    return sorted(name for name in wanted if not (folder / name).is_file())


def load_into(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """Load the folder's model (and optimizer) state into this rank's shards, resharding
    as needed (a collective when the model is sharded)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    try:
        with _one_process_quiet():
            if optimizer is None:
                model_state = get_model_state_dict(model)
                dcp.load({"model": model_state}, checkpoint_id=folder)
                set_model_state_dict(model, model_state)
                return
            model_state, optim_state = get_state_dict(model, optimizer)
            dcp.load({"model": model_state, "optimizer": optim_state}, checkpoint_id=folder)
            set_state_dict(model, optimizer, model_state_dict=model_state,
                           optim_state_dict=optim_state)  # fmt: skip
    except UserError:
        raise
    except _failures() as exc:
        raise shard_check.load_error(folder, exc) from None


def consolidate(folder: Path) -> dict[str, Any]:
    """One checkpoint dict (``model`` as a full state_dict, ``config``, ``step``, ...) from
    a sharded folder, in this process: what ``trainwell export`` writes out.

    Example (in ``tests/e2e/test_fsdp.py``)::

        state = consolidate(run / "checkpoints" / "last")
        model.load_state_dict(state["model"])
    """
    import tempfile

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    state = load_state(folder)
    with tempfile.TemporaryDirectory(prefix="trainwell-consolidate-") as tmp:
        whole = Path(tmp) / "whole.pt"
        try:
            dcp_to_torch_save(folder, whole)
        except _failures() as exc:
            raise UserError(f"checkpoint {folder} could not be consolidated: "
                            f"{_error_text(exc)}") from None  # fmt: skip
        full = torch.load(whole, map_location="cpu", weights_only=True)
    state["model"] = {k: v for k, v in full["model"].items() if isinstance(v, torch.Tensor)}
    state["optimizer"] = full.get("optimizer", {})
    del state["sharded"]
    return state


def is_folder(path: Path) -> bool:
    """Whether ``path`` is a sharded checkpoint folder (committed or not).

    Example:
        >>> is_folder(Path("runs/x/checkpoints/last.pt"))
        False
    """
    return path.is_dir() and ((path / MARKER).exists() or (path / ".metadata").exists()
                              or (path / STATE).exists())  # fmt: skip


@contextlib.contextmanager
def _one_process_quiet() -> Iterator[None]:
    # DCP warns on every call without a process group; one process is a supported case.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _write_marker(folder: Path) -> None:
    with open(folder / MARKER, "w") as f:
        f.write("committed\n")
        f.flush()
        os.fsync(f.fileno())
    ckpt.fsync_dir(folder)


def _swap(tmp: Path, folder: Path) -> None:
    """``tmp`` becomes ``folder``; the old ``folder`` goes only after."""
    old = folder.parent / f".{folder.name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        os.replace(folder, old)
    os.replace(tmp, folder)
    ckpt.fsync_dir(folder.parent)
    shutil.rmtree(old, ignore_errors=True)


def _failures() -> tuple[type[BaseException], ...]:
    """What a DCP call can raise. Its ``CheckpointException`` is a ``BaseException``,
    which ``except Exception`` lets through. Imported only here, once a call failed:
    ``torch.distributed.checkpoint`` takes most of a second to import, too much for
    every ``import trainwell``."""
    from torch.distributed.checkpoint.api import CheckpointException

    return (Exception, CheckpointException)


def _error_text(exc: BaseException) -> str:
    exc = shard_check.root_cause(exc)
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:240]}"
