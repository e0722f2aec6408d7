"""ONNX: writing a model with named inputs/outputs and dynamic axes, checking it with
``onnx.checker``, and running it in ONNX Runtime (which needs no torch model code).

onnx and onnxruntime are the ``trainwell[onnx]`` extra: imported inside the functions, so
``import trainwell`` stays light and their absence is one line naming the extra.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import json
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainwell.errors import UserError

META_KEY = "trainwell"  # the metadata_props entry holding the artifact's description
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# How each exporter names an operator it cannot translate.
_UNSUPPORTED = (
    re.compile(r"No ONNX function found for <OpOverload\(op='([^']+)', overload='([^']+)'\)>"),
    re.compile(r"Exporting the operator '([^']+)' to ONNX opset version (\d+) is not supported"),
    re.compile(r"unrecognized namespace ([\w.]+::[\w.]+)"),
)


def require_onnx() -> tuple[Any, Any]:
    """``(onnx, onnxruntime)``, or one line saying to install the extra.

    Example:
        >>> onnx, ort = require_onnx()
        >>> hasattr(ort, "InferenceSession")
        True
    """
    try:
        import onnx
        import onnxruntime
    except ImportError as exc:
        raise UserError(
            f"ONNX needs the onnx extra ({exc.name or 'onnx'} is not installed): "
            "pip install 'trainwell[onnx]'"
        ) from None
    return onnx, onnxruntime


def recommended_dynamo() -> bool:
    """Whether the installed torch recommends its torch.export-based ONNX exporter (its
    default for ``torch.onnx.export``: from torch 2.9 on) over the TorchScript-based one."""
    param = inspect.signature(torch.onnx.export).parameters.get("dynamo")
    return bool(param is not None and param.default is True)


def write_onnx(
    model: nn.Module,
    inputs: dict[str, torch.Tensor],
    output_names: list[str],
    dynamic: dict[str, list[int]],
    path: Path,
    opset: int | None,
) -> str:
    """Export ``model`` to ``path``; returns the exporter that succeeded.

    The recommended exporter goes first and the other is the fallback. ``dynamic`` names
    the axes of each input left free (the batch axis at least). An operator neither can
    translate is one :class:`UserError` line naming it.
    """
    order = [True, False] if recommended_dynamo() else [False, True]
    errors: list[BaseException] = []
    for dynamo in order:
        try:
            with _quiet():
                _export(model, inputs, output_names, dynamic, path, opset, dynamo)
            # torch.export leaves fake tensors in reference cycles; free them now, not at
            # some later collection in the middle of the caller's work.
            gc.collect()
            return "torch.export (dynamo)" if dynamo else "TorchScript-based"
        except Exception as exc:  # each exporter fails in its own types; the fallback decides
            errors.append(exc)
    raise UserError(_failure(errors, opset))


def _export(
    model: nn.Module,
    inputs: dict[str, torch.Tensor],
    output_names: list[str],
    dynamic: dict[str, list[int]],
    path: Path,
    opset: int | None,
    dynamo: bool,
) -> None:
    kwargs: dict[str, Any] = {
        "input_names": list(inputs),
        "output_names": output_names,
        "dynamo": dynamo,
    }
    if opset is not None:
        kwargs["opset_version"] = opset
    if dynamo:
        from torch.export import Dim

        # AUTO: free where the model allows it; a model that fixes a size (a reshape to a
        # constant batch) specializes it, and parity at other sizes then says so.
        kwargs["dynamic_shapes"] = tuple({d: Dim.AUTO for d in dynamic.get(n, [])} for n in inputs)
        kwargs["verbose"] = False
    else:
        axes = {n: {d: "batch" if d == 0 else f"{n}_dim{d}" for d in dynamic.get(n, [])}
                for n in inputs}  # fmt: skip
        kwargs["dynamic_axes"] = {**axes, **{n: {0: "batch"} for n in output_names}}
    torch.onnx.export(model, tuple(inputs.values()), str(path), **kwargs)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' progress, deprecation notes and graph dumps, which they print
    from C++ as well as Python: file descriptors 1 and 2 point to a scratch file."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo")]
    levels = [lg.level for lg in loggers]
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for lg in loggers:
                lg.setLevel(logging.ERROR)
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


def _failure(errors: list[BaseException], opset: int | None) -> str:
    texts = [_ANSI.sub("", f"{e}\n{e.__cause__ or ''}") for e in errors]
    at = f"opset {opset}" if opset else "the default opset"
    for text in texts:
        for pattern in _UNSUPPORTED:
            if match := pattern.search(text):
                op = match.group(1)
                op = op if "::" in op else op.replace(".", "::", 1)  # aten._linalg_eigh
                return (
                    f"ONNX export: the operator {op} is not supported at {at} by either "
                    "exporter; try another --opset, --format torchscript, or replace that "
                    "operation in the model"
                )
    return f"ONNX export failed with both exporters: {'; '.join(_summary(t) for t in texts)}"


def _summary(text: str) -> str:
    # The torch.export-based exporter puts the cause under "## Exception summary".
    _, _, after = text.partition("## Exception summary")
    lines = [ln.strip() for ln in (after or text).splitlines() if ln.strip()]
    return lines[0][:300] if lines else "unknown error"


def finish_onnx(raw: Path, path: Path, meta: dict[str, Any]) -> Any:
    """Save the exporter's ``raw`` file to ``path`` as one self-contained file with ``meta``
    recorded (the inputs' free axes as the graph has them), and run ``onnx.checker`` on
    it; returns the model proto."""
    onnx, _ = require_onnx()
    proto = onnx.load(str(raw))  # with any side file of weights
    shapes = graph_shapes(proto)  # the truth about which axes stayed free
    for spec in meta["inputs"]:
        spec["shape"] = shapes.get(spec["name"], spec["shape"])
    entry = proto.metadata_props.add()
    entry.key, entry.value = META_KEY, json.dumps(meta)
    onnx.save(proto, str(path))
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        raise RuntimeError(f"the exported ONNX file fails onnx.checker: {first}") from exc
    return proto


def graph_shapes(proto: Any) -> dict[str, list[int | None]]:
    """Each graph input's shape: an int where fixed, ``None`` where dynamic."""
    shapes = {}
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        shapes[value.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    return shapes


class OnnxRunner:
    """An ONNX file in ONNX Runtime on the CPU: named numpy arrays in, a list of arrays out.

    Example:
        >>> run = OnnxRunner("model.onnx")  # doctest: +SKIP
        >>> run({"input": x})[0].shape  # doctest: +SKIP
        (7, 10)
    """

    def __init__(self, path: str | Path) -> None:
        onnx, ort = require_onnx()
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: shape notes go into the parity table
        try:
            self.session = ort.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(
                f"{path} is not an ONNX model ONNX Runtime can load ({first})"
            ) from None
        self.meta = self._meta(path)

    def _meta(self, path: str | Path) -> dict[str, Any]:
        found = self.session.get_modelmeta().custom_metadata_map.get(META_KEY)
        if found:
            return json.loads(found)
        # Not written by trainwell: the graph says its inputs; what the outputs mean is unknown.
        types = {"tensor(float)": "float32", "tensor(int64)": "int64", "tensor(double)": "float64"}
        inputs = [{"name": i.name, "dtype": types.get(i.type, "float32"),
                   "shape": [d if isinstance(d, int) else None for d in i.shape]}
                  for i in self.session.get_inputs()]  # fmt: skip
        return {"inputs": inputs, "task": {"kind": "outputs"}, "source": Path(path).name}

    def __call__(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(None, inputs)
