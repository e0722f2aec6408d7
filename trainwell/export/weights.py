"""safetensors: the weights alone (no code, no pickle, loadable from any framework).

The file is read back and compared bit for bit before it is renamed into place; when the
checkpoint carries its run's config, a model rebuilt with the reloaded weights is also
compared with the checkpoint's model on real batches.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch

from trainwell.errors import UserError
from trainwell.export.files import check_destination, staged
from trainwell.export.parity import Parity, check_parity, run_model
from trainwell.export.probe import probe
from trainwell.export.source import read_checkpoint, rebuild, resolve_checkpoint


def write_safetensors(
    source: str | Path, output: str | Path | None = None, model_parity: bool = True
) -> tuple[Path, Parity | None, list[str]]:
    """Write the weights of ``source`` as safetensors; ``(path, parity, notes)``.

    The default path is beside the checkpoint, ``<name>.safetensors``. The metadata
    records the step, the source and the run's config. ``out`` ends up either the
    complete, checked export or untouched; the checkpoint read is never replaced, nor
    any other checkpoint.
    """
    from safetensors.torch import load_file, save_file

    path = resolve_checkpoint(source)
    out = Path(output) if output else path.with_suffix(".safetensors")
    check_destination(out, path)
    state = read_checkpoint(path)
    tensors = _weights(state["model"], path)
    metadata = {
        "format": "pt",
        "source": path.name,
        "step": _step_text(state.get("step", "")),
        "config": _config_json(state.get("config", {}), path),
    }
    parity: Parity | None = None
    notes: list[str] = []
    with staged(out) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)
        reloaded = load_file(str(tmp))
        _check_bits(tensors, reloaded, out)
        if model_parity:
            parity, notes = _model_parity(path, state, reloaded, out)
    return out, parity, notes


def _model_parity(
    path: Path, state: dict[str, Any], reloaded: dict[str, torch.Tensor], out: Path
) -> tuple[Parity | None, list[str]]:
    try:
        loaded = rebuild(path, state)
    except UserError as exc:
        # The weights need no code: a checkpoint without (importable) model code still
        # exports; only the output comparison is skipped, and the user is told why.
        return None, [f"output parity skipped: {exc}"]
    twin = copy.deepcopy(loaded.model)
    twin.load_state_dict(reloaded)
    found = probe(loaded)

    def artifact(arrays: dict) -> list:
        tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
        return [t.numpy() for t in run_model(twin, tensors)]

    parity = check_parity(loaded.model, artifact, found.batches, out.name)
    return parity, []


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


def _check_bits(
    tensors: dict[str, torch.Tensor], loaded: dict[str, torch.Tensor], out: Path
) -> None:
    """What a user will load is exactly what was trained; checked before the rename."""
    bad = [k for k, v in tensors.items() if k not in loaded or not same_bits(v, loaded[k])]
    if bad or loaded.keys() != tensors.keys():
        raise RuntimeError(f"safetensors parity check failed for {out}: {bad[:5]}")


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same bytes (NaN included), dtype and shape.

    Example:
        >>> same_bits(torch.tensor([float("nan")]), torch.tensor([float("nan")]))
        True
    """
    # Bytes, not values: NaN != NaN, and a diverged run's weights still export exactly.
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
