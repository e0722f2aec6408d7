"""The real batches an export is made and checked with, and the description of the model's
inputs and outputs that travels inside the artifact (so predict needs no model code)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trainwell.engine.build.given_model import CHECKPOINT_KEY
from trainwell.export.batches import (
    Batch,
    describe_task,
    labels_of,
    model_inputs,
    name_inputs,
    sample_batch,
)
from trainwell.export.parity import run_model
from trainwell.export.source import Loaded

# The export traces one batch of EXAMPLE_SIZE; parity runs every size here, 1 and odd
# sizes included, which the export never saw.
EXAMPLE_SIZE = 4
PARITY_SIZES = (1, EXAMPLE_SIZE, 7, 32)


@dataclass
class Probe:
    """The example batch, the parity batches, and the artifact's description (``meta``)."""

    example: Batch
    batches: list[Batch]
    meta: dict[str, Any]
    output_names: list[str]
    dynamic: dict[str, list[int]]


def probe(loaded: Loaded) -> Probe:
    """Batches of every parity size from the run's data, and what they show of the model:
    input names, dtypes and shapes (axes that vary between batches are dynamic), outputs,
    and the task (class scores, regression values) learned from the targets.

    Example:
        >>> found = probe(load_model("runs/my-run"))  # doctest: +SKIP
        >>> found.meta["inputs"]  # doctest: +SKIP
        [{'name': 'input', 'dtype': 'float32', 'shape': [None, 1, 8, 8]}]
    """
    parts, model = loaded.parts, loaded.model
    batches = []
    for size in PARITY_SIZES:
        if loaded.examples is not None:
            batches.append(recorded_batch(loaded, size))
            continue
        raw = sample_batch(parts, size)
        batches.append(Batch(model_inputs(parts, raw, model), labels_of(parts, raw)))
    index = PARITY_SIZES.index(EXAMPLE_SIZE)
    example = batches[index]
    every_output = [run_model(model, b.inputs) for b in batches]
    outputs = every_output[index]
    task = describe_task(outputs[0], example.labels)
    dynamic = {n: _varying([b.inputs[n] for b in batches]) for n in example.inputs}
    names = _output_names(len(outputs), task)
    meta = {
        "format": 1,
        "source": loaded.path.name,
        "step": loaded.step,
        "config": loaded.state.get("config"),
        "inputs": [_spec(n, t, dynamic[n]) for n, t in example.inputs.items()],
        "outputs": [
            _spec(n, t, _varying([o[i] for o in every_output]))
            for i, (n, t) in enumerate(zip(names, outputs))
        ],  # fmt: skip
        "example_batch": EXAMPLE_SIZE,
        "task": task,
    }
    return Probe(example, batches, meta, names, dynamic)


def recorded_batch(loaded: Loaded, size: int) -> Batch:
    """A batch of ``size`` from the inputs recorded for a run whose data was passed to
    ``fit()``: the recorded samples, then copies of them, real-valued inputs perturbed
    (a fixed seed) so that the parity check sees distinct rows."""
    args, kwargs = loaded.examples or ((), {})
    named = name_inputs(tuple(args), dict(kwargs), loaded.model, None)
    generator = torch.Generator().manual_seed(size)
    inputs = {name: _tiled(t, size, generator) for name, t in named.items()}
    labels = loaded.state.get(CHECKPOINT_KEY, {}).get("example_labels")
    if isinstance(labels, torch.Tensor) and labels.ndim:
        labels = labels[torch.arange(size) % labels.shape[0]]
    return Batch(inputs, labels if isinstance(labels, torch.Tensor) else None)


def _tiled(tensor: Any, size: int, generator: torch.Generator) -> Any:
    if not isinstance(tensor, torch.Tensor) or tensor.ndim == 0:
        return tensor
    n = tensor.shape[0]
    out = tensor[torch.arange(size) % n].clone()
    if out.is_floating_point() and size > n:
        spread = float(tensor.float().std()) if tensor.numel() > 1 else 1.0
        noise = torch.randn(out[n:].shape, generator=generator) * 0.1 * (spread or 1.0)
        out[n:] += noise.to(out.dtype)
    return out


def _varying(tensors: list[Any]) -> list[int]:
    """The batch axis, and every axis whose size differs between the batches."""
    ndim = tensors[0].ndim
    return [0, *(d for d in range(1, ndim) if len({t.shape[d] for t in tensors}) > 1)]


def _output_names(count: int, task: dict[str, Any]) -> list[str]:
    if count == 1:
        return ["logits" if task["kind"] == "classification" else "output"]
    return [f"output_{i}" for i in range(count)]


def _spec(name: str, tensor: Any, dynamic: list[int]) -> dict[str, Any]:
    shape = [None if d in dynamic else int(s) for d, s in enumerate(tensor.shape)]
    return {"name": name, "dtype": str(tensor.dtype).replace("torch.", ""), "shape": shape}
