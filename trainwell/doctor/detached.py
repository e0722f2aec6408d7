"""Explaining ``backward()`` on a loss with no graph ("element 0 of tensors does not
require grad and does not have a grad_fn"): which part of the loss's statement cut it
off from the model, when the statement says, and where the fix goes."""

from __future__ import annotations

import ast
import types

from torch import nn

from trainwell.doctor.findings import Finding
from trainwell.doctor.nonfinite import loss_assignment
from trainwell.doctor.sites import Site, parse
from trainwell.doctor.source import call_name

NO_GRAD_FN = "does not require grad and does not have a grad_fn"

# Calls whose result has no gradient back to their input, and what to say of each.
_CUTS = {
    "argmax": "argmax returns indices, which have no gradient",
    "argmin": "argmin returns indices, which have no gradient",
    "argsort": "argsort returns indices, which have no gradient",
    "item": ".item() makes a Python number, outside autograd",
    "tolist": ".tolist() makes Python numbers, outside autograd",
    "numpy": ".numpy() leaves autograd",
    "detach": ".detach() cuts the graph",
    "long": ".long() makes integers, which have no gradient",
    "int": ".int() makes integers, which have no gradient",
    "tensor": "torch.tensor(...) makes a new leaf without the graph",
}


def explain_detached(models: list[nn.Module], frame: types.FrameType) -> Finding:
    """The finding for a backward on a loss with no graph, raised at ``frame``'s line."""
    backward = Site(frame.f_code.co_filename, frame.f_lineno)
    site = loss_assignment(backward) or backward
    cut = _cut_in(site)
    params = [p for m in models for p in m.parameters()]
    if cut is not None:
        why, fix = cut, ("compute the loss from the model's float output (logits or "
                         "probabilities); take argmax / round / .item() only of what you "
                         "report")  # fmt: skip
    elif params and not any(p.requires_grad for p in params):
        why = "every parameter of the model has requires_grad=False (all frozen)"
        fix = "unfreeze what should train (p.requires_grad_(True)) before building the optimizer"
    else:
        why = ("it was computed under torch.no_grad() / inference_mode(), or from tensors "
               "that were detached")  # fmt: skip
        fix = "compute the training loss with grad enabled, from the model's output as returned"
    return Finding(
        code="loss-no-gradient",
        severity="error",
        file=site.file,
        line=site.line,
        message=f"backward() on a loss that is not connected to the model: {why}",
        why="a loss without a graph back to the weights cannot train them",
        fix=fix,
        related=[] if site == backward else [
            {"file": backward.file, "line": backward.line, "what": "backward"}],
        evidence={},
    )  # fmt: skip


def _cut_in(site: Site) -> str | None:
    """What, in the statement at ``site``, returns a tensor without a graph."""
    tree = parse(site.file)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno == site.line:
            for call in ast.walk(node):
                name = call_name(call)
                if name in _CUTS:
                    return _CUTS[name]
            return None
    return None
