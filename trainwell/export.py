"""Export a run's weights for others, with a parity check that reads them back.

Today: safetensors (weights only: no code, no pickle, loadable from any framework).
The source is a checkpoint file or a run directory (its ``best.pt``, else ``last.pt``).

Example:
    >>> out = export_safetensors("runs/my-run")  # doctest: +SKIP
    >>> out.name  # doctest: +SKIP
    'best.safetensors'
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from trainwell.engine.checkpoint import load_checkpoint
from trainwell.errors import UserError


def resolve_checkpoint(source: str | Path) -> Path:
    """The checkpoint file behind ``source``: the file itself, or a run's best/last."""
    source = Path(source)
    if source.is_dir():
        for name in ("best.pt", "last.pt"):
            if (source / "checkpoints" / name).is_file():
                return source / "checkpoints" / name
        raise UserError(f"{source} holds no checkpoints/best.pt or checkpoints/last.pt")
    if not source.exists():
        raise UserError(f"{source} does not exist (give a run directory or a checkpoint)")
    return source


def export_safetensors(source: str | Path, output: str | Path | None = None) -> Path:
    """Write the model weights of ``source`` as safetensors and check them bit for bit.

    Returns the path written (default: beside the checkpoint, ``<name>.safetensors``).
    The file's metadata records the step, the source and the run's config.
    """
    from safetensors.torch import load_file, save_file

    path = resolve_checkpoint(source)
    state = load_checkpoint(path)
    # safetensors refuses tensors that share memory (tied weights) or are not
    # contiguous; independent contiguous copies are always accepted.
    tensors = {k: v.detach().clone().contiguous() for k, v in state["model"].items()}
    metadata = {
        "format": "pt",
        "source": path.name,
        "step": str(state.get("step", "")),
        "config": json.dumps(state.get("config", {})),
    }
    out = Path(output) if output else path.with_suffix(".safetensors")
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        save_file(tensors, str(tmp), metadata=metadata)
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    # Parity: what a user will load is exactly what was trained.
    loaded = load_file(str(out))
    bad = [k for k, v in tensors.items() if k not in loaded or not torch.equal(v, loaded[k])]
    if bad or loaded.keys() != tensors.keys():
        out.unlink(missing_ok=True)
        raise RuntimeError(f"safetensors parity check failed for {out}: {bad[:5]}")
    return out
