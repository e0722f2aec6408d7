"""The first cause of a non-finite loss, for the three probes that report one (the data:
``nonfinite-input``; an earlier update: ``nonfinite-grad``; an operation of the forward
or of the loss: ``nonfinite-loss``), when the doctor sends ``on_nonfinite_loss``.

The cause is worked out once per backward (kept in the event's ``memo``) and each probe
reports it only when it is its own: only the first cause is reported, everything after
it is its consequence.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

import torch

from trainwell.doctor.data_origin import data_origin
from trainwell.doctor.events import BackwardEvent, Reporter
from trainwell.doctor.nonfinite import (
    all_finite,
    float_param_device,
    float_tensors,
    loss_assignment,
    nan_data_in_graph,
    replay,
)
from trainwell.doctor.records import ForwardRecord
from trainwell.doctor.sites import Site, parse
from trainwell.doctor.source import param_path, qualified_names

NONFINITE_CODES = ("nonfinite-input", "nonfinite-grad", "nonfinite-loss")


@dataclass
class Cause:
    """Why the loss went non-finite: the code of the finding that says so, where it
    points, what happened, and the loss's backward."""

    code: str
    site: Site
    what: str
    backward: Site
    evidence: dict[str, Any] = field(default_factory=dict)
    forward: Site | None = None  # the model's call, when it is not the finding's line
    params: list[str] = field(default_factory=list)  # nonfinite-grad: the weights
    fetched: Site | None = None  # nonfinite-input: the loop that got the batch


def first_cause(doc: Reporter, event: BackwardEvent) -> Cause | None:
    """The first cause of this backward's non-finite loss (``None`` when it cannot be
    placed in the user's code, or when a non-finite finding came before: then this is
    its consequence)."""
    if "cause" not in event.memo:
        reported = any(f.code in NONFINITE_CODES for f in doc.findings)
        event.memo["cause"] = None if reported else _diagnose(doc, event)
    return event.memo["cause"]


def _diagnose(doc: Reporter, event: BackwardEvent) -> Cause | None:
    site = event.site
    if site is None:
        # The engine's loop: no user line on the stack. The data can still be judged,
        # pointed at where the engine says the data set is defined (its ``data_site``).
        data = getattr(doc, "data_site", None)
        return None if data is None else _bad_batch(doc, data)
    # 1. The data was already bad.
    bad = _bad_batch(doc, site)
    if bad is not None:
        return bad
    loss = event.tensor.detach()
    evidence: dict[str, Any] = {"step": doc.steps + 1, "loss": str(loss.flatten()[0].item())}
    forwards = [r for r in doc.step_forwards if float_param_device(r.module) is not None]
    for record in forwards:
        cause = _in_forward(doc, record, site, evidence)
        if cause is not None:
            return cause
    # 4. The models' outputs are finite: the loss, or what it compares them with.
    line = loss_assignment(site) or site
    if nan_data_in_graph(event.tensor):
        what = "a tensor the loss uses besides the model's output (the targets?) holds NaN"
        return Cause("nonfinite-input", line, what, site)
    evidence.update(model_output_finite=True)
    what = "the model's output is finite; the loss computation turned it into NaN/Inf"
    fwd = forwards[-1].site if forwards else None
    return Cause("nonfinite-loss", line, what, site, evidence, fwd)


def crash_cause(doc: Reporter, site: Site) -> Cause | None:
    """The first cause of a NaN/Inf that made an operation raise before any loss was
    backwarded (``binary_cross_entropy`` given NaN probabilities raises "all elements of
    input should be between 0 and 1"): the data, or the first non-finite operation of
    this step's forwards, replayed. ``site`` is the line that raised."""
    bad = _bad_batch(doc, site)
    if bad is not None:
        return bad
    evidence: dict[str, Any] = {"step": doc.steps + 1}
    forwards = [r for r in doc.step_forwards if float_param_device(r.module) is not None]
    for record in forwards:
        cause = _in_forward(doc, record, site, evidence)
        if cause is not None:
            return cause
    return None


def _bad_batch(doc: Reporter, site: Site) -> Cause | None:
    """The last batch a DataLoader gave, when it holds NaN/Inf: pointed at the line
    that makes the NaN (the dataset's transform) when it can be found, else at the loop
    that got the batch."""
    batch = doc.last_batch
    if batch is None or all_finite(float_tensors(batch.batch)):
        return None
    what = f"batch {batch.index} of this pass over the DataLoader holds NaN/Inf"
    made = data_origin(doc, batch.loader)
    if made is not None:
        what += "; it is made here, in the data pipeline"
    # In the engine, the loop over the loader is trainwell's: the data set's own line.
    defined = getattr(doc, "data_site", None)
    return Cause("nonfinite-input", made or defined or batch.site or site, what, site,
                 {"batch_index": batch.index}, fetched=batch.site)  # fmt: skip


def _in_forward(
    doc: Reporter, record: ForwardRecord, site: Site, evidence: dict[str, Any]
) -> Cause | None:
    """The cause within one forward of the step: its inputs, its weights, or the first
    operation that turned finite values into NaN/Inf (found by replaying it)."""
    model, at = record.module, record.site
    inputs = float_tensors((record.args, record.kwargs))
    # Inputs made by an earlier model of this step are that model's business.
    if not all_finite([t for t in inputs if t.grad_fn is None]):
        return Cause("nonfinite-input", at or site, "the model's input holds NaN/Inf", site)
    # 2. The weights were already bad: an earlier update was not finite.
    root = doc.model_name(model)
    bad = [param_path(n, root) for n, p in model.named_parameters() if not all_finite([p.detach()])]
    if bad:
        what = ("the weights themselves are NaN/Inf: an earlier optimizer step applied "
                "non-finite values")  # fmt: skip
        return Cause("nonfinite-grad", site, what, site, params=bad)
    # 3. Replay the forward and find the first operation that went non-finite.
    device = float_param_device(model)
    autocast = record.autocast_for(device.type) if device is not None else None
    names = qualified_names(model, root)
    origin, finite_output = replay(doc, model, record.args, record.kwargs, autocast, names)
    if origin is not None and origin["site"] is not None:
        module = origin["module"] or type(model).__name__
        what = (f"`{origin['op']}` in {module} turned finite inputs into NaN/Inf "
                "(the model's first non-finite value)")  # fmt: skip
        evidence.update(module=module, op=origin["op"], inputs_finite=True)
        where = origin["site"]
        if autocast is not None and autocast[1] == torch.float16:
            # float16's range ends at 65504: the fix is the precision (or the scale of
            # the values), chosen at the autocast line.
            what += (" under float16 autocast, whose largest value is 65504: scale the "
                     "inputs down, or autocast to torch.bfloat16 (fp32's range)")  # fmt: skip
            where = (_autocast_line(at) if at is not None else None) or where
        return Cause("nonfinite-loss", where, what, site, evidence, at)
    if not finite_output:
        what = "the model's output is NaN/Inf (the operation could not be told)"
        return Cause("nonfinite-loss", at or site, what, site, evidence, at)
    return None


def _autocast_line(call: Site) -> Site | None:
    """The ``with torch.autocast(...)`` statement around the model's call, if any."""
    tree = parse(call.file)
    best = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.With) and node.lineno <= call.line <= (node.end_lineno or 0):
            names = {ast.unparse(i.context_expr).split("(")[0] for i in node.items}
            if any(n.endswith("autocast") for n in names) and node.lineno > (best or 0):
                best = node.lineno
    return Site(call.file, best) if best else None
