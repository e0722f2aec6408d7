"""TorchScript: ``torch.jit.trace`` (or ``torch.jit.script`` when asked), saved with a
description of its inputs, and loaded back for parity and predict.

A trace records the operations one example ran: shapes or branches that depend on the
data are frozen. torch says so in its TracerWarnings, which are kept as notes; the parity
check on other batch sizes then shows whether they matter.
"""

from __future__ import annotations

import json
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainwell.errors import UserError
from trainwell.export.parity import flat_outputs

META_FILE = "trainwell.json"  # the extra file holding the artifact's description


def write_torchscript(
    model: nn.Module, inputs: dict[str, torch.Tensor], path: Path, meta: dict[str, Any],
    script: bool = False,
) -> list[str]:  # fmt: skip
    """Trace (or script) ``model`` and save it to ``path``; returns the tracer's warnings."""
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if script:
                module = torch.jit.script(model)
            else:
                module = torch.jit.trace(model, tuple(inputs.values()), check_trace=False)
        except Exception as exc:  # torch.jit raises many types; all mean "cannot convert"
            how = "torch.jit.script" if script else "torch.jit.trace (try --script)"
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(f"TorchScript export: {how} failed: {first}") from None
    for w in caught:
        if issubclass(w.category, torch.jit.TracerWarning):
            # Its first sentence names the hazard; the rest is the same advice each time.
            text = f"tracer: {str(w.message).split('. ')[0]}"
            if text not in notes:
                notes.append(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's own deprecation
        torch.jit.save(module, str(path), _extra_files={META_FILE: json.dumps(meta)})
    return notes


def is_torchscript(path: Path) -> bool:
    """A TorchScript archive (code inside), as opposed to a checkpoint (data only)."""
    try:
        with zipfile.ZipFile(path) as z:
            return any("/code/" in n or n.endswith("/constants.pkl") for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


class TorchScriptRunner:
    """A saved TorchScript module: named numpy arrays in, a list of arrays out.

    Example:
        >>> run = TorchScriptRunner("model.torchscript")  # doctest: +SKIP
        >>> run.meta["inputs"][0]["name"]  # doctest: +SKIP
        'input'
    """

    def __init__(self, path: str | Path) -> None:
        extra = {META_FILE: ""}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit's deprecation notes
            try:
                self.module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
            except Exception as exc:  # a damaged archive surfaces as several types
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
                raise UserError(f"{path} is not a loadable TorchScript file ({first})") from None
        if not extra[META_FILE]:
            raise UserError(
                f"{path} was not written by `trainwell export` (no {META_FILE} inside), so "
                "its inputs are unknown; export the run again"
            )
        self.meta = json.loads(extra[META_FILE])
        self.module.eval()

    def __call__(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        args = [torch.from_numpy(np.ascontiguousarray(a)) for a in inputs.values()]
        with torch.inference_mode():
            return [t.numpy() for t in flat_outputs(self.module(*args))]
