"""ONNX and TorchScript exports of a run: rebuild, trace on a real batch, check, rename.

Each export is written under a temporary name beside its destination, checked (the ONNX
checker; parity against the PyTorch model on batches of several sizes) and only then
renamed into place: a failed check leaves nothing behind and raises :class:`ParityError`.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwell.export.files import check_destination, staged
from trainwell.export.parity import Parity, ParityError, check_parity
from trainwell.export.probe import EXAMPLE_SIZE, probe
from trainwell.export.source import load_model, resolve_checkpoint

SUFFIXES = {
    "onnx": ".onnx",
    "torchscript": ".torchscript",
    "safetensors": ".safetensors",
    "pt": ".consolidated.pt",
}


@dataclass
class ExportResult:
    """What an export wrote and how it was checked."""

    path: Path
    format: str
    source: Path
    parity: Parity | None = None
    how: str = ""
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """A short human report: what, how, parity table, notes."""
        lines = [f"exported {self.source} to {self.format}: {self.how}".rstrip(": ")]
        lines += self.parity.lines() if self.parity else []
        return lines + [f"note: {n}" for n in self.notes]


def export_graph(
    fmt: str, source: str | Path, out: str | Path | None, opset: int | None, script: bool
) -> ExportResult:
    """Export ``source`` to ``fmt`` (``onnx`` or ``torchscript``), checked for parity."""
    path = resolve_checkpoint(source)
    dest = Path(out) if out else path.with_suffix(SUFFIXES[fmt])
    check_destination(dest, path)
    if fmt == "onnx":
        from trainwell.export.onnx_file import require_onnx

        require_onnx()  # before minutes of work, not after
    loaded = load_model(path)
    found = probe(loaded)
    result = ExportResult(dest, fmt, path, meta=found.meta)
    with staged(dest) as tmp:
        if fmt == "onnx":
            runner = _onnx(loaded.model, found, tmp, opset, result)
        else:
            runner = _torchscript(loaded.model, found, tmp, script, result)
        result.parity = check_parity(loaded.model, runner, found.batches, dest.name, EXAMPLE_SIZE)
        if not result.parity.ok:
            raise ParityError(result.parity, result.notes)
    return result


def _onnx(model: Any, found: Any, tmp: Path, opset: int | None, result: ExportResult) -> Any:
    from trainwell.export.onnx_file import OnnxRunner, finish_onnx, write_onnx

    # The exporter may put the weights in a side file named after its output: it writes
    # into a scratch folder, and one self-contained file is saved to ``tmp``.
    with tempfile.TemporaryDirectory(prefix="trainwell-onnx-") as scratch:
        raw = Path(scratch) / "model.onnx"
        exporter = write_onnx(
            model, found.example.inputs, found.output_names, found.dynamic, raw, opset
        )
        proto = finish_onnx(raw, tmp, found.meta)
    version = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), "?")
    result.how = (
        f"opset {version}, {exporter} exporter, {_signature(found.meta)}; onnx.checker passed"
    )
    return OnnxRunner(tmp)


def _torchscript(model: Any, found: Any, tmp: Path, script: bool, result: ExportResult) -> Any:
    from trainwell.export.torchscript_file import TorchScriptRunner, write_torchscript

    result.notes += write_torchscript(model, found.example.inputs, tmp, found.meta, script)
    how = "torch.jit.script" if script else f"torch.jit.trace on a batch of {EXAMPLE_SIZE}"
    result.how = f"{how}, {_signature(found.meta)}"
    return TorchScriptRunner(tmp)


def _signature(meta: dict[str, Any]) -> str:
    def one(spec: dict[str, Any]) -> str:
        dims = ", ".join("batch" if i == 0 and d is None else "?" if d is None else str(d)
                         for i, d in enumerate(spec["shape"]))  # fmt: skip
        return f"{spec['name']}[{dims}] {spec['dtype']}"

    ins = ", ".join(one(s) for s in meta["inputs"])
    outs = ", ".join(one(s) for s in meta["outputs"])
    return f"{ins} -> {outs}"
