"""``--format pt``: a checkpoint as one ``.pt`` file, a sharded folder consolidated.

A sharded checkpoint (``dist.strategy=fsdp``: a DCP folder, every rank's shards) becomes
one ordinary trainwell checkpoint: the full model and optimizer state with the loop's
state and the config, loadable with ``torch.load(weights_only=True)`` on one process, by
``trainwell export``/``predict``, or by ``--resume PATH`` with ``dist.strategy=ddp``.
The file is read back and compared bit for bit before it is renamed into place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainwell.engine.checkpointing.checkpoint import load_checkpoint, save_atomic
from trainwell.errors import UserError
from trainwell.export.files import check_destination, staged
from trainwell.export.source import read_checkpoint, resolve_checkpoint
from trainwell.export.weights import same_bits

SUFFIX = ".consolidated.pt"


def write_consolidated(source: str | Path, output: str | Path | None = None) -> tuple[Path, Path]:
    """Write ``source``'s checkpoint as one file; returns ``(written, checkpoint read)``.

    The default path is beside the checkpoint: ``checkpoints/last`` gives
    ``checkpoints/last.consolidated.pt`` (a name ``--resume auto`` does not pick up).

    Example:
        >>> write_consolidated("runs/my-fsdp-run")  # doctest: +SKIP
        (PosixPath('runs/my-fsdp-run/checkpoints/best.consolidated.pt'), ...)
    """
    path = resolve_checkpoint(source)
    out = Path(output) if output else path.with_name(path.name.removesuffix(".pt") + SUFFIX)
    check_destination(out, path)
    state = read_checkpoint(path)
    with staged(out) as tmp:
        save_atomic(state, tmp)
        _check_same(state["model"], load_checkpoint(tmp)["model"], out)
    return out, path


def _check_same(model: dict[str, Any], loaded: dict[str, Any], out: Path) -> None:
    tensors = {k: v for k, v in model.items() if isinstance(v, torch.Tensor)}
    bad = [k for k, v in tensors.items() if k not in loaded or not same_bits(v, loaded[k])]
    if bad:
        raise UserError(f"{out}: the consolidated weights read back differ ({', '.join(bad[:5])})")
