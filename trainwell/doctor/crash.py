"""Explaining a crash: what held the memory at an out-of-memory error, and which carried
tensor made a backward go through a freed graph.

Called by the runner (and the engine) with the exception and its traceback; each
explanation is a finding that points into the user's code.
"""

from __future__ import annotations

import re
import types
from typing import Any

import torch

from trainwell.doctor.carried import (
    INPLACE,
    Watched,
    detach_fix,
    find_carried,
    inplace_line,
    modified_parameter,
    parse_modified,
    replay_inplace,
    step_line,
)
from trainwell.doctor.crash_common import explain_common
from trainwell.doctor.detached import NO_GRAD_FN, explain_detached
from trainwell.doctor.findings import Finding
from trainwell.doctor.head import head_for_label
from trainwell.doctor.nonfinite_crash import explain_nan_crash, is_nan_crash
from trainwell.doctor.oom import explain_oom
from trainwell.doctor.sites import Site, is_user_file

OOM_MARKERS = ("out of memory", "can't allocate memory", "CUDA error: out of memory")
SECOND_BACKWARD = "Trying to backward through the graph a second time"
LABEL_MARKER = re.compile(r"Target (-?\d+) is out of bounds")
DEVICE_MARKERS = (
    "Expected all tensors to be on the same device",
    "is not on the expected device",
    "Expected object of device type",
    "should be the same or input should be a MKLDNN tensor",  # conv: input vs weight type
    "Input type (",
)


def explain(doc: Watched, exc: BaseException) -> None:
    """Add findings that explain ``exc``, when a known pitfall caused it."""
    doc.crashed = True
    frame = _innermost_user_frame(exc.__traceback__)
    if frame is None or explain_common(doc, exc, frame):
        return
    text = str(exc)
    if isinstance(exc, torch.OutOfMemoryError) or any(m in text for m in OOM_MARKERS):
        doc.add(explain_oom(frame, text))
    elif LABEL_MARKER.search(text):
        if any(f.code == "label-out-of-range" for f in doc.findings):
            return  # the labels probe saw them before PyTorch raised
        # The labels probe checks every call at first, then a sample: PyTorch's own
        # IndexError catches a bad label in an unchecked batch, and is explained here.
        doc.add(_label_crash(doc, frame, text))
    elif any(m in text for m in DEVICE_MARKERS):
        doc.add(_device_mismatch(frame, text))
    elif NO_GRAD_FN in text:
        doc.add(explain_detached(doc.models(), frame))
    elif is_nan_crash(text):
        _add(doc, explain_nan_crash(doc, frame, text))
    elif SECOND_BACKWARD in text or INPLACE in text:
        _add(doc, _second_backward(doc, frame) if SECOND_BACKWARD in text
             else _inplace(doc, frame, text))  # fmt: skip


def _add(doc: Watched, finding: Finding | None) -> None:
    if finding is not None:
        doc.add(finding)


def _innermost_user_frame(tb: types.TracebackType | None) -> types.FrameType | None:
    frame = None
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            frame = tb.tb_frame
        tb = tb.tb_next
    return frame


def _label_crash(doc: Watched, frame: types.FrameType, text: str) -> Finding:
    site, related = Site(frame.f_code.co_filename, frame.f_lineno), []
    label = LABEL_MARKER.search(text)
    models = [r.module for r in reversed(doc.step_forwards)] + doc.models()
    bad = int(label.group(1)) if label else -1
    head = head_for_label(models, bad, [site.file]) if bad > 0 and not _one_based(frame) else None
    if head is not None:
        # One rare label after many good batches: a class the head lacks or a bad label,
        # so the line stays at the loss and the head's size is related.
        what = "the head: its number of outputs is set here"
        related = [{"file": head[0].file, "line": head[0].line, "what": what}, *head[1]]
    return Finding(
        code="label-out-of-range",
        severity="error",
        file=site.file,
        line=site.line,
        related=related,
        message=f"the loss got a class label outside [0, num_classes): {text.strip()[:120]}",
        why="class labels index the model's outputs; on a GPU the same bug is the cryptic "
        "'device-side assert triggered'",
        fix=(f"remap the labels to 0..C-1, or give the head (line {head[0].line}) at least "
             f"{bad + 1} outputs if there are that many classes") if head is not None else (
            "make the labels 0..C-1 (1-based labels: y - 1) or give the model as many "
            "outputs as there are classes (max label + 1)"),
        evidence={"exception": text.strip()[:300]},
    )


def _one_based(frame: types.FrameType) -> bool:
    """Whether the labels in the failing line's scope start at 1 (their fix is y - 1)."""
    labels = [v for v in frame.f_locals.values() if isinstance(v, torch.Tensor)
              and v.dtype in (torch.int64, torch.int32) and v.dim() == 1 and v.numel()]  # fmt: skip
    return any(int(v.min()) >= 1 for v in labels)


def _device_mismatch(frame: types.FrameType, text: str) -> Finding:
    """Which of the tensors and models in the failing line's scope are on which device."""
    places: dict[str, str] = {}
    for name, value in frame.f_locals.items():
        for label, obj in _tensors_and_modules(name, value):
            device = _device_of(obj)
            if device is not None:
                places[label] = device
    by_device: dict[str, list[str]] = {}
    for label, device in places.items():
        by_device.setdefault(device, []).append(label)
    summary = "; ".join(f"on {d}: {', '.join(sorted(n)[:6])}" for d, n in sorted(by_device.items()))
    return Finding(
        code="device-mismatch",
        severity="error",
        file=frame.f_code.co_filename,
        line=frame.f_lineno,
        # One device in sight: the other tensor is a temporary; PyTorch's words name it.
        message="tensors on different devices meet here: "
        + (summary if len(by_device) > 1 else f"{summary}; {' '.join(text.split())[:160]}"),
        why="every operation needs its inputs (and a layer's weights) on one device; "
        "PyTorch never moves them for you",
        fix="pick the device once (device = torch.device('cuda' if "
        "torch.cuda.is_available() else 'cpu')), call model.to(device) after building the "
        "model (and before building the optimizer), and move every batch with "
        "x.to(device), y.to(device)",
        evidence={"devices": places, "exception": " ".join(text.split())[:300]},
    )


def _tensors_and_modules(name: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, (torch.Tensor, torch.nn.Module)):
        found = [(name, value)]
        if isinstance(value, torch.nn.Module) and name == "self":
            # Inside a model's forward: its direct parts and the tensors they hold.
            found = [(f"self.{n}", m) for n, m in value.named_children()]
            found += [(f"self.{n}", p) for n, p in value.named_parameters(recurse=False)]
        return found
    if isinstance(value, (list, tuple)):
        return [(f"{name}[{i}]", v) for i, v in enumerate(value[:8])
                if isinstance(v, (torch.Tensor, torch.nn.Module))]  # fmt: skip
    return []


def _device_of(obj: Any) -> str | None:
    if isinstance(obj, torch.Tensor):
        return str(obj.device)
    devices = {str(p.device) for p in obj.parameters()} | {str(b.device) for b in obj.buffers()}
    if not devices:
        return None
    return devices.pop() if len(devices) == 1 else "/".join(sorted(devices))


def _second_backward(doc: Watched, frame: types.FrameType) -> Finding | None:
    """A state carried from step to step (``h = rnn(x, h)``) without ``detach()``."""
    carried = find_carried(doc)
    if carried is None:
        return None
    return Finding(
        code="graph-retained",
        severity="error",
        file=carried.site.file,
        line=carried.site.line,
        message=f"`{carried.name}` is carried from step to step without detach(), so this "
        "step's backward reaches into the previous step's graph, already freed",
        why="without detach the graph (and its memory) would grow with every step; PyTorch "
        "stops at the second backward instead",
        fix=detach_fix(carried),
        related=[{"file": frame.f_code.co_filename, "line": frame.f_lineno, "what": "backward"}],
        evidence={"exception": SECOND_BACKWARD},
    )


def _inplace(doc: Watched, frame: types.FrameType, text: str) -> Finding | None:
    """Autograd's "modified by an inplace operation", explained: a carried state whose
    weights the optimizer changed, a step between a forward and its backward, or an
    in-place op on a tensor autograd saved."""
    ref = doc.last_backward
    loss = ref() if ref is not None else None
    mod = parse_modified(text, loss)
    backward = {"file": frame.f_code.co_filename, "line": frame.f_lineno, "what": "backward"}
    evidence = {"exception": " ".join(text.split())[:300], "saved_by": mod.node,
                "shape": list(mod.shape)}  # fmt: skip
    held = modified_parameter(frame, mod)
    if held is not None:
        carried = find_carried(doc)
        if carried is not None:
            return Finding(
                code="inplace-modified", severity="error", file=carried.site.file,
                line=carried.site.line,
                message=f"`{carried.name}` is carried from step to step without detach(), "
                "and backward(retain_graph=True) keeps the old graph: its weights were since "
                "changed in place by optimizer.step()",
                why="the kept graph needs the weights as they were when it was built",
                fix=detach_fix(carried) + "; then retain_graph=True is not needed",
                related=[backward], evidence=evidence,
            )  # fmt: skip
        name, _ = held
        line = step_line(frame, name) or frame.f_lineno
        return Finding(
            code="inplace-modified", severity="error", file=frame.f_code.co_filename,
            line=line,
            message=f"{name}.step() changed weights in place between a forward and the "
            "backward through it: the graph saved the old weights",
            why="a GAN's discriminator updated before the generator's backward through "
            "its output is the classic case",
            fix="run each loss's backward before the step that changes the weights it went "
            "through: recompute the output after the step (e.g. D(fake) again for the "
            "generator), or detach() what the other network gets",
            related=[backward], evidence=evidence,
        )  # fmt: skip
    site = replay_inplace(doc, mod.producer)
    if site is None:
        line = inplace_line(frame, _function_start(frame))
        site = Site(frame.f_code.co_filename, line) if line else None
    if site is None:
        return None
    return Finding(
        code="inplace-modified", severity="error", file=site.file, line=site.line,
        message=f"an in-place operation here changes a tensor {mod.shape and list(mod.shape)} "
        f"that autograd saved for the backward ({mod.node or mod.producer})",
        why="the backward needs the tensor as it was in the forward; PyTorch refuses to use "
        "a changed one",
        fix="use the out-of-place form (x = x + y, not x += y; masked_fill, not masked_fill_; "
        "inplace=False; torch.where instead of slice assignment), or clone() before it",
        related=[backward], evidence=evidence,
    )  # fmt: skip


def _function_start(frame: types.FrameType) -> int:
    return frame.f_code.co_firstlineno if frame.f_code.co_name != "<module>" else 1
