"""A crash caused by a NaN/Inf before any loss went non-finite: an operation that checks
its input's range raised (``binary_cross_entropy`` given NaN probabilities, CUDA's
assert on the same, ``torch.multinomial`` sampling from NaN probabilities). Explained
like a NaN loss: the first non-finite operation of the step's forward, found by
replaying it, else the first non-finite tensor the failing line's function holds."""

from __future__ import annotations

import linecache
import types
from typing import Any

import torch

from trainwell.doctor.events import Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.labels import assigned_line
from trainwell.doctor.nonfinite_cause import Cause, crash_cause
from trainwell.doctor.sites import Site

NAN_CRASH_MARKERS = (
    "all elements of input should be between 0 and 1",  # binary_cross_entropy on the CPU
    "input_val >= zero && input_val <= one",  # the same, CUDA's device-side assert
    "probability tensor contains either `inf`, `nan` or element < 0",  # multinomial
)


def is_nan_crash(text: str) -> bool:
    """Whether the exception's text is one an operation raises on NaN/Inf input."""
    return any(m in text for m in NAN_CRASH_MARKERS)


def explain_nan_crash(doc: Reporter, frame: types.FrameType, text: str) -> Finding | None:
    """The finding for a range check that failed on NaN/Inf, or ``None`` when no
    non-finite value is in sight (then the values were out of range but finite)."""
    if any(f.code.startswith("nonfinite") for f in doc.findings):
        return None  # a NaN loss was explained before: the crash is its consequence
    site = Site(frame.f_code.co_filename, frame.f_lineno)
    try:
        cause = crash_cause(doc, site) or _held(frame, site)
    except RuntimeError:  # the device is gone (a CUDA assert): nothing can be read
        return None
    if cause is None:
        return None
    related = [{"file": site.file, "line": site.line, "what": "the operation that raised"}]
    fwd = cause.forward
    if fwd is not None and (fwd.file, fwd.line) not in {(cause.site.file, cause.site.line),
                                                        (site.file, site.line)}:  # fmt: skip
        related.append({"file": fwd.file, "line": fwd.line, "what": "the model's call"})
    said = " ".join(text.split())[:160]
    data = cause.code == "nonfinite-input"
    return Finding(
        code=cause.code,
        severity="error",
        file=cause.site.file,
        line=cause.site.line,
        message=f"a NaN/Inf made the script crash at step {doc.steps + 1} ({said}): "
        f"{cause.what}",
        why="NaN fails every range check downstream; here it crashed before the loss",
        fix="clean the data where it is loaded (impute or drop missing values, guard "
        "divisions by a zero std)" if data else _fix(str(cause.evidence.get("op", ""))),
        related=related,
        evidence={**cause.evidence, "exception": said},
    )


_FIXES = {
    "sqrt": "sqrt of a negative value: a standard deviation from a log-variance is "
    "exp(0.5 * log_var), not sqrt(log_var); otherwise sqrt(x.clamp(min=0) + 1e-8)",
    "log": "log of a value <= 0: log(x.clamp(min=1e-8)), or work in log space from the "
    "start (F.logsigmoid, F.log_softmax)",
    "div": "a division by zero (0/0 is NaN): x / (y + 1e-8) or x / y.clamp(min=1e-8)",
}


def _fix(op: str) -> str:
    """The fix for the operation that made the first NaN (``torch.sqrt`` -> sqrt's)."""
    key = next((k for k in _FIXES if k in op.lower()), None)
    general = ("keep the operation in its finite range (an eps, a clamp), and give the "
               "loss logits (BCEWithLogitsLoss) rather than probabilities")  # fmt: skip
    return f"{_FIXES[key]}; {general}" if key else general


def _held(frame: types.FrameType, site: Site) -> Cause | None:
    """The first assigned non-finite tensor the failing function holds: a NaN made
    outside any model (``w = mask / mask.sum()`` in the loop)."""
    lines = []
    for name, value in list(frame.f_locals.items()):
        if (isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel()
                and not bool(torch.isfinite(value.detach()).all())):  # fmt: skip
            line = assigned_line(site.file, name)
            if line is not None and line <= site.line:
                lines.append((line, name))
    if not lines:
        return None
    line, name = min(lines)
    what: Any = f"`{name}` holds NaN/Inf from here (the first such tensor in this function)"
    text = linecache.getline(site.file, line)
    op = next((k for k in ("sqrt", "log", "/") if k in text), "")
    return Cause("nonfinite-loss", Site(site.file, line), what, site,
                 {"op": "div" if op == "/" else op})  # fmt: skip
