"""What predict runs: a run (or checkpoint) rebuilt in PyTorch, an ONNX file in ONNX
Runtime, or a TorchScript file; each takes named numpy arrays and returns numpy arrays,
and each knows its inputs, its task and its run's config (the data of ``--split``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainwell.errors import UserError
from trainwell.export.source import Loaded, RunParts, build_run_parts, config_from, load_model


@dataclass
class Artifact:
    """One model to predict with, whatever its form."""

    name: str
    kind: str  # "run", "onnx" or "torchscript"
    meta: dict[str, Any]
    run: Callable[[dict[str, np.ndarray]], list[np.ndarray]]
    loaded: Loaded | None = None

    def parts(self) -> RunParts:
        """The run's data and steps: rebuilt from the config recorded in the artifact."""
        if self.loaded is not None:
            return self.loaded.parts
        return build_run_parts(config_from(self.meta.get("config"), self.name))


def open_artifact(source: str | Path) -> Artifact:
    """Open a run directory, a checkpoint, an ``.onnx`` file or a TorchScript file.

    Example:
        >>> open_artifact("runs/my-run/checkpoints/best.onnx").kind  # doctest: +SKIP
        'onnx'
    """
    path = Path(source)
    if not path.exists():
        raise UserError(f"{path} does not exist (give a run, a checkpoint, an .onnx file or a "
                        "TorchScript file)")  # fmt: skip
    if path.suffix == ".onnx":
        from trainwell.export.onnx_file import OnnxRunner

        onnx_runner = OnnxRunner(path)
        return Artifact(str(path), "onnx", onnx_runner.meta, onnx_runner)
    from trainwell.export.torchscript_file import TorchScriptRunner, is_torchscript

    if path.is_file() and is_torchscript(path):
        ts_runner = TorchScriptRunner(path)
        return Artifact(str(path), "torchscript", ts_runner.meta, ts_runner)
    return _run_artifact(path)


def _run_artifact(path: Path) -> Artifact:
    from trainwell.export.parity import run_model
    from trainwell.export.probe import probe

    loaded = load_model(path)
    meta = probe(loaded).meta

    def run(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
        return [t.numpy() for t in run_model(loaded.model, tensors)]

    return Artifact(str(loaded.path), "run", meta, run, loaded)
