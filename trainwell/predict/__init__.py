"""Predictions from a trained run, an ONNX file or a TorchScript file, on a ``.npy`` array
or a split of the run's data.

The three give the same numbers: a run is rebuilt from its config, an ONNX file runs in
ONNX Runtime with no torch model code, a TorchScript file runs as saved; the inputs they
take and what their outputs mean are recorded in every artifact ``trainwell export``
writes. With targets (a data split), classification reports accuracy and a confusion
matrix, regression MAE and RMSE.

Example:
    >>> from trainwell.predict import predict
    >>> result = predict("runs/my-run/checkpoints/best.onnx", split="test")  # doctest: +SKIP
    >>> result.accuracy, result.labels[:3]  # doctest: +SKIP
    (0.97, [3, 8, 1])
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainwell.errors import UserError
from trainwell.predict.finite import count_nonfinite, nonfinite_note, warn
from trainwell.predict.inputs import fit_to, read_array
from trainwell.predict.report import Tally
from trainwell.predict.runners import Artifact, open_artifact

__all__ = ["Predictions", "predict"]


@dataclass
class Predictions:
    """What :func:`predict` found: per-sample predictions and, with targets, metrics."""

    source: str
    kind: str
    on: str
    tally: Tally

    @property
    def predictions(self) -> list[Any]:
        """One per sample: a class index, a value, or an array (tokens, vectors)."""
        return [r.item() if np.ndim(r) == 0 else r for r in self.tally.rows]

    @property
    def labels(self) -> list[Any]:
        """The predicted classes (classification only; else the predicted values)."""
        return self.predictions

    @property
    def accuracy(self) -> float | None:
        """Share of targets predicted right, when the data has class targets."""
        return self.tally.accuracy

    def lines(self) -> list[str]:
        """A report: what ran on what, then the metrics or the predictions."""
        head = f"{self.kind} {self.source} on {self.on}: {len(self.tally.rows)} samples"
        return [head, *(self.tally.metric_lines() or self.tally.prediction_lines())]


def predict(
    source: str | Path,
    inputs: str | Path | np.ndarray | None = None,
    *,
    split: str | None = None,
    out: str | Path | None = None,
    batch_size: int = 256,
) -> Predictions:
    """Predict with ``source`` (a run, a checkpoint, an ``.onnx`` or TorchScript file) on
    ``inputs`` (a ``.npy`` path or an array) or on a split of its run's data (default:
    ``"test"``); ``out`` writes every prediction as CSV.

    Bad input is one :class:`~trainwell.errors.UserError` line: an array of the wrong
    shape or dtype, a split the data does not have, ``out`` in a missing folder, one of
    the inputs or a run's own file as ``out``, an array whose every sample holds NaN/Inf
    (some such samples: one warning line on stderr; their predictions are written).

    Example:
        >>> import numpy as np
        >>> x = np.zeros((2, 1, 8, 8), dtype=np.float32)
        >>> predict("runs/my-run/checkpoints/best.torchscript", x).labels  # doctest: +SKIP
        [4, 4]
    """
    from trainwell.outputs import check_output

    if inputs is not None and split is not None:
        raise UserError("predict: give INPUT.npy or --split, not both")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"--batch-size: expected a positive int, got {batch_size!r}")
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        array_file = None if isinstance(inputs, np.ndarray) else inputs
        read = [(source, "the model being read"), (array_file, "the input array")]
        check_output(out_path, "--out", verb="predict", inputs=read)
    array = read_array(inputs) if inputs is not None else None  # checked before the model
    artifact = open_artifact(source)
    tally = Tally(artifact.meta.get("task") or {"kind": "outputs"})
    batches: Iterator[tuple[dict[str, np.ndarray], np.ndarray | None]]
    if array is not None:
        on = array[1]
        batches = _array_batches(artifact, *array, batch_size)
    else:
        split = split or "test"
        on = f"the {split} split"
        batches = _split_batches(artifact, split, batch_size)
    for arrays, labels in batches:
        tally.add(artifact.run(arrays)[0], labels)
    if out_path is not None:
        tally.write_csv(out_path)
    return Predictions(artifact.name, artifact.kind, on, tally)


def _array_batches(
    artifact: Artifact, arr: np.ndarray, name: str, batch_size: int
) -> Iterator[tuple[dict[str, np.ndarray], None]]:
    specs = artifact.meta["inputs"]
    if len(specs) != 1:
        names = ", ".join(s["name"] for s in specs)
        raise UserError(
            f"the model takes {len(specs)} inputs ({names}); a .npy holds one: use --split"
        )
    arr = fit_to(arr, specs[0], name)
    warn(nonfinite_note(arr, name))  # every sample NaN/Inf: refused, before any prediction
    for start in range(0, len(arr), batch_size):
        yield {specs[0]["name"]: arr[start : start + batch_size]}, None


def _split_batches(
    artifact: Artifact, split: str, batch_size: int
) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray | None]]:
    from trainwell.export.batches import labels_of, model_inputs, raw_batches

    parts = artifact.parts()
    model = artifact.loaded.model if artifact.loaded is not None else None
    specs = {s["name"]: s for s in artifact.meta["inputs"]}
    seen = bad = 0
    for raw in raw_batches(parts, split, batch_size):
        inputs = model_inputs(parts, raw, model, list(specs))
        arrays = {
            k: fit_to(v.numpy(), specs[k], f"the {split} split's {k}") for k, v in inputs.items()
        }
        labels = labels_of(parts, raw)
        seen += len(next(iter(arrays.values())))
        bad += max(count_nonfinite(a)[0] for a in arrays.values())
        yield arrays, None if labels is None else labels.numpy()
    if bad:  # a split is the run's own data: a warning, whatever the share
        warn(f"the {split} split: {bad} of {seen} samples hold NaN/Inf; their predictions "
             "are NaN or meaningless")  # fmt: skip
