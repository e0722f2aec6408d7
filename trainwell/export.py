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
import tempfile
from pathlib import Path
from typing import Any

import torch

from trainwell.engine.checkpoint import load_checkpoint
from trainwell.errors import UserError

# Files an export must never replace: they hold training state, not exported weights.
_CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")


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
    The file's metadata records the step, the source and the run's config. The file is
    written under a temporary name, read back and compared, then renamed: ``out`` is
    either the complete, checked export or untouched. It never replaces the checkpoint
    it reads, nor any other checkpoint.
    """
    from safetensors.torch import save_file

    path = resolve_checkpoint(source)
    out = Path(output) if output else path.with_suffix(".safetensors")
    _refuse_overwrite(path, out)
    state = load_checkpoint(path)
    tensors = _weights(state["model"], path)
    metadata = {
        "format": "pt",
        "source": path.name,
        "step": _step_text(state.get("step", "")),
        "config": _config_json(state.get("config", {}), path),
    }
    # mkstemp: a unique name in the destination's folder, so the rename is atomic and two
    # exports at once do not write into one temporary file.
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        save_file(tensors, str(tmp), metadata=metadata)
        _check_parity(tensors, tmp, out)
        # mkstemp makes the file private (0600); an export is for sharing: the mode any
        # new file gets under the user's umask.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, out)
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)  # gone already after the rename
    return out


def _refuse_overwrite(path: Path, out: Path) -> None:
    """Refuse an output that would replace the input checkpoint or another checkpoint."""
    same = out.resolve() == path.resolve()
    if not same and out.exists():
        try:
            same = out.samefile(path)  # a hard link to the checkpoint
        except OSError:
            same = False
    if same:
        raise UserError(
            f"export: --output {out} is the checkpoint being exported; choose another path "
            f"(default: {path.with_suffix('.safetensors')})"
        )
    if out.is_file() and out.suffix in _CHECKPOINT_SUFFIXES:
        raise UserError(
            f"export: --output {out} would replace an existing checkpoint; choose another "
            "path (safetensors files end in .safetensors)"
        )
    if out.is_dir():
        raise UserError(f"export: --output {out} is a folder; give the file to write")


def _weights(model: Any, path: Path) -> dict[str, torch.Tensor]:
    """The state_dict as independent dense tensors, or one line naming what is wrong."""
    if not isinstance(model, dict):
        raise UserError(
            f"checkpoint {path}: 'model' is a {type(model).__name__}, not a state_dict "
            "(a dict of parameter names to tensors)"
        )
    if not model:
        raise UserError(f"checkpoint {path}: 'model' holds no weights (an empty state_dict)")
    for name, value in model.items():
        _check_weight(name, value, path)
    # safetensors refuses tensors that share memory (tied weights) or are not
    # contiguous; independent contiguous copies are always accepted.
    return {k: v.detach().clone().contiguous() for k, v in model.items()}


def _check_weight(name: Any, value: Any, path: Path) -> None:
    if not isinstance(name, str):
        raise UserError(
            f"checkpoint {path}: 'model' has a key {name!r} ({type(name).__name__}); "
            "parameter names are strings"
        )
    if not isinstance(value, torch.Tensor):
        raise UserError(
            f"checkpoint {path}: 'model' entry {name!r} is a {type(value).__name__}, not a tensor"
        )
    if value.layout is not torch.strided:
        raise UserError(
            f"checkpoint {path}: 'model' entry {name!r} is a sparse tensor ({value.layout}); "
            "safetensors holds dense tensors only (save it with .to_dense())"
        )
    if value.is_meta or value.is_quantized or value.is_nested:
        raise UserError(
            f"checkpoint {path}: 'model' entry {name!r} is a meta, quantized or nested tensor, "
            "which safetensors cannot hold"
        )


def _step_text(step: Any) -> str:
    # A step saved as a one-element tensor reads as its number, not "tensor(3)".
    if isinstance(step, torch.Tensor) and step.numel() == 1:
        return str(step.item())
    return str(step)


def _config_json(config: Any, path: Path) -> str:
    try:
        return json.dumps(config)
    except (TypeError, ValueError) as exc:
        raise UserError(
            f"checkpoint {path}: its 'config' cannot be recorded as JSON ({exc}); it should "
            "be the run's config as plain values"
        ) from None


def _check_parity(tensors: dict[str, torch.Tensor], written: Path, out: Path) -> None:
    """What a user will load is exactly what was trained; checked before the rename."""
    from safetensors.torch import load_file

    loaded = load_file(str(written))
    bad = [k for k, v in tensors.items() if k not in loaded or not _same_bits(v, loaded[k])]
    if bad or loaded.keys() != tensors.keys():
        raise RuntimeError(f"safetensors parity check failed for {out}: {bad[:5]}")


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    # Bytes, not values: NaN != NaN, and a diverged run's weights still export exactly.
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _umask() -> int:
    # The umask can only be read by setting it; set it straight back.
    mask = os.umask(0)
    os.umask(mask)
    return mask
