"""Export a run's model for use outside training, with a numerical parity check.

Formats: ONNX (dynamic batch axis, named inputs/outputs, ``onnx.checker``, parity in ONNX
Runtime), TorchScript (traced, or scripted on request; parity of the loaded module) and
safetensors (the weights alone, read back bit for bit); ``pt`` writes the checkpoint as
one file (a sharded ``dist.strategy=fsdp`` folder consolidated). The source is a checkpoint file
or a run directory (its ``best.pt``, else ``last.pt``); the model is rebuilt from the
checkpoint's own config, or for a ``fit(model=obj)`` run from the class and arguments it
recorded (:mod:`trainwell.engine.build.model_record`), and its weights loaded with
``weights_only=True``. :func:`trainwell.load_model` does the same in Python.

Every export is written under a temporary name and renamed only once checked: a failed
parity check raises :class:`ParityError` and leaves nothing behind.

Example:
    >>> from trainwell.export import to_onnx
    >>> result = to_onnx("runs/my-run")  # doctest: +SKIP
    >>> result.path.name, result.parity.ok  # doctest: +SKIP
    ('best.onnx', True)
"""

from __future__ import annotations

from pathlib import Path

from trainwell.errors import UserError
from trainwell.export.artifact import SUFFIXES, ExportResult, export_graph
from trainwell.export.parity import Parity, ParityError
from trainwell.export.source import load_model, resolve_checkpoint
from trainwell.export.weights import write_safetensors

FORMATS = tuple(SUFFIXES)

__all__ = [
    "FORMATS",
    "ExportResult",
    "Parity",
    "ParityError",
    "export",
    "export_safetensors",
    "load_model",
    "resolve_checkpoint",
    "to_onnx",
    "to_checkpoint",
    "to_safetensors",
    "to_torchscript",
]


def to_onnx(
    source: str | Path, out: str | Path | None = None, *, opset: int | None = None
) -> ExportResult:
    """Export to ONNX (default ``<checkpoint>.onnx``) and check it in ONNX Runtime.

    Needs the ``trainwell[onnx]`` extra. Raises :class:`ParityError` when ONNX Runtime
    disagrees with the model, :class:`~trainwell.errors.UserError` for bad input or an
    operator ONNX cannot express (named).

    Example:
        >>> result = to_onnx("runs/my-run", "model.onnx", opset=18)  # doctest: +SKIP
        >>> [row.batch for row in result.parity.rows]  # doctest: +SKIP
        [1, 4, 7, 32]
    """
    if opset is not None and (not isinstance(opset, int) or isinstance(opset, bool) or opset < 7):
        raise UserError(f"--opset: expected an ONNX opset version (an int >= 7), got {opset!r}")
    return export_graph("onnx", source, out, opset, script=False)


def to_torchscript(
    source: str | Path, out: str | Path | None = None, *, script: bool = False
) -> ExportResult:
    """Export to TorchScript (default ``<checkpoint>.torchscript``) by ``torch.jit.trace``
    (``script=True``: ``torch.jit.script``) and check the loaded module.

    Example:
        >>> to_torchscript("runs/my-run").parity.ok  # doctest: +SKIP
        True
    """
    return export_graph("torchscript", source, out, None, script=script)


def to_safetensors(source: str | Path, out: str | Path | None = None) -> ExportResult:
    """Export the weights to safetensors, read back bit for bit and, when the checkpoint
    has its run's config, compared on outputs in a rebuilt model.

    Example:
        >>> to_safetensors("runs/my-run").path.name  # doctest: +SKIP
        'best.safetensors'
    """
    path = resolve_checkpoint(source)
    written, parity, notes = write_safetensors(path, out)
    result = ExportResult(written, "safetensors", path, parity, "weights only", notes)
    if parity is not None and not parity.ok:  # pragma: no cover - identical bits
        raise ParityError(parity)
    return result


def to_checkpoint(source: str | Path, out: str | Path | None = None) -> ExportResult:
    """The checkpoint as one ``.pt`` file: a sharded folder (``dist.strategy=fsdp``)
    consolidated, read back bit for bit.

    Example:
        >>> to_checkpoint("runs/my-fsdp-run").path.name  # doctest: +SKIP
        'best.consolidated.pt'
    """
    from trainwell.export.consolidated import write_consolidated

    written, path = write_consolidated(source, out)
    how = "one file; loads with torch.load(weights_only=True)"
    return ExportResult(written, "pt", path, None, how)


def export_safetensors(source: str | Path, output: str | Path | None = None) -> Path:
    """Write the weights of ``source`` as safetensors (bit-for-bit checked); returns the path.

    Example:
        >>> out = export_safetensors("runs/my-run")  # doctest: +SKIP
        >>> out.name  # doctest: +SKIP
        'best.safetensors'
    """
    return write_safetensors(source, output, model_parity=False)[0]


def export(
    source: str | Path,
    format: str = "onnx",
    out: str | Path | None = None,
    *,
    opset: int | None = None,
    script: bool = False,
) -> ExportResult:
    """Export ``source`` to ``format`` (``onnx``, ``torchscript``, ``safetensors``, or ``pt``:
    one checkpoint file, a sharded one consolidated).

    Example:
        >>> export("runs/my-run", "torchscript", "model.torchscript")  # doctest: +SKIP
    """
    if format == "onnx":
        return to_onnx(source, out, opset=opset)
    if format == "torchscript":
        return to_torchscript(source, out, script=script)
    if format == "safetensors":
        return to_safetensors(source, out)
    if format == "pt":
        return to_checkpoint(source, out)
    raise UserError(f"export: unknown format {format!r}; choose from {', '.join(FORMATS)}")
