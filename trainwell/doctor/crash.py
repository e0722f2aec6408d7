"""Explaining a crash: what held the memory at an out-of-memory error, and which carried
tensor made a backward go through a freed graph.

Called by the runner (and the engine) with the exception and its traceback; each
explanation is a finding that points into the user's code.
"""

from __future__ import annotations

import gc
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
from trainwell.doctor.sites import Site, is_user_file

OOM_MARKERS = ("out of memory", "can't allocate memory", "CUDA error: out of memory")
SECOND_BACKWARD = "Trying to backward through the graph a second time"
LABEL_MARKER = re.compile(r"Target -?\d+ is out of bounds")
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
        doc.add(_oom(frame, text))
    elif LABEL_MARKER.search(text):
        if any(f.code == "label-out-of-range" for f in doc.findings):
            return  # the labels probe saw them before PyTorch raised
        # The labels probe checks every call at first, then a sample: PyTorch's own
        # IndexError catches a bad label in an unchecked batch, and is explained here.
        doc.add(_label_crash(frame, text))
    elif any(m in text for m in DEVICE_MARKERS):
        doc.add(_device_mismatch(frame, text))
    elif NO_GRAD_FN in text:
        doc.add(explain_detached(doc.models(), frame))
    elif SECOND_BACKWARD in text or INPLACE in text:
        finding = (_second_backward(doc, frame) if SECOND_BACKWARD in text
                   else _inplace(doc, frame, text))  # fmt: skip
        if finding is not None:
            doc.add(finding)


def _innermost_user_frame(tb: types.TracebackType | None) -> types.FrameType | None:
    frame = None
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            frame = tb.tb_frame
        tb = tb.tb_next
    return frame


def _oom(frame: types.FrameType, text: str) -> Finding:
    """The largest live tensors, named by the user's variables that hold them."""
    names = _names_in_scope(frame)
    tensors = []
    for obj in gc.get_objects():
        # type(), not isinstance: isinstance asks an object's __class__, and some
        # (torch.distributed.reduce_op) warn when asked.
        cls = type(obj)
        if issubclass(cls, torch.Tensor) and not issubclass(cls, torch.nn.Parameter):
            try:
                size = obj.untyped_storage().nbytes()
            except (RuntimeError, NotImplementedError):
                continue
            tensors.append((size, obj))
    tensors.sort(key=lambda t: -t[0])
    largest = [
        {
            "bytes": size,
            "shape": list(t.shape),
            "device": str(t.device),
            "held_by": names.get(id(t), "unnamed (inside a container or the autograd graph)"),
            "has_graph": t.grad_fn is not None,
        }
        for size, t in tensors[:5]
    ]
    params = sum(p.numel() * p.element_size() for p in _parameters(frame))
    return Finding(
        code="oom",
        severity="error",
        file=frame.f_code.co_filename,
        line=frame.f_lineno,
        message="out of memory here: " + " ".join(text.split())[:200],
        why="the step needed more memory than the device has; the largest live tensors and "
        "their holders are in the evidence",
        fix="lower the batch size (keep the global batch with gradient accumulation), use "
        "mixed precision (bf16/fp16), activation checkpointing, run evaluation under "
        "torch.no_grad(), and do not keep tensors with graphs across steps",
        evidence={"largest_tensors": largest, "parameter_bytes": params},
    )


def _label_crash(frame: types.FrameType, text: str) -> Finding:
    return Finding(
        code="label-out-of-range",
        severity="error",
        file=frame.f_code.co_filename,
        line=frame.f_lineno,
        message=f"the loss got a class label outside [0, num_classes): {text.strip()[:120]}",
        why="class labels index the model's outputs; on a GPU the same bug is the cryptic "
        "'device-side assert triggered'",
        fix="make the labels 0..C-1 (1-based labels: y - 1) or give the model as many "
        "outputs as there are classes (max label + 1)",
        evidence={"exception": text.strip()[:300]},
    )


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


def _names_in_scope(frame: types.FrameType) -> dict[int, str]:
    names: dict[int, str] = {}
    f: types.FrameType | None = frame
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            for scope in (f.f_locals, f.f_globals):
                for name, value in scope.items():
                    if isinstance(value, torch.Tensor):
                        names.setdefault(id(value), name)
        f = f.f_back
    return names


def _parameters(frame: types.FrameType) -> list[torch.nn.Parameter]:
    seen: dict[int, torch.nn.Parameter] = {}
    for scope in (frame.f_locals, frame.f_globals):
        for value in scope.values():
            if isinstance(value, torch.nn.Module):
                for p in value.parameters():
                    seen[id(p)] = p
    return list(seen.values())


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
