"""Whose gradients pile up, for ``missing-zero-grad``: the optimizer (by the user's
name for it), the model its parameters belong to, and the line where the fix goes when
the script does clear gradients, only not these (a GAN's ``reset_grad()`` that zeroes
the discriminator's optimizer alone, ``netD.zero_grad()`` where ``netG`` was meant)."""

from __future__ import annotations

import ast
import types
from dataclasses import dataclass
from typing import Any

from torch import nn

from trainwell.doctor.sites import Site, is_user_file, parse, user_frame, variable_name


@dataclass
class Uncleared:
    """The optimizer whose gradients are never cleared, and what is cleared instead."""

    optimizer: str  # the user's name for it ("g_optimizer"), or ""
    model: str  # the model whose parameters pile up ("G"), or ""
    cleared: list[str]  # the optimizers zeroed meanwhile ("d_optimizer")
    site: Site | None  # a zero_grad of the others: the fix goes beside it


def describe(
    doc: Any, optimizer: Any, param: Any, frame: types.FrameType | None,
    zeroed: dict[int, tuple[str, Site | None]], step: Site,
) -> Uncleared:  # fmt: skip
    """Name the optimizer and the model of ``param``; ``zeroed`` maps id(optimizer) to
    (name, site of its zero_grad) for the optimizers the script did zero."""
    name = variable_name(optimizer, frame) or ""
    model = _model_of(doc, param)
    others = {k: v for k, v in zeroed.items() if k != id(optimizer)}
    cleared = [n for n, _ in others.values() if n]
    site = next((s for _, s in reversed(list(others.values())) if s is not None), None)
    if site is None and id(optimizer) not in zeroed:
        site = _module_zero_grad(step, frame, param)  # model.zero_grad() on another model?
    return Uncleared(name, model, cleared, site)


def _model_of(doc: Any, param: Any) -> str:
    for model in doc.models():
        if isinstance(model, nn.Module) and any(p is param for p in model.parameters()):
            return doc.model_name(model)
    return ""


def _module_zero_grad(step: Site, frame: types.FrameType | None, param: Any) -> Site | None:
    """The last ``X.zero_grad()`` written before the step in its function (or module
    level), when ``X`` is another model: the script clears gradients there, only not
    these. ``None`` when it is this model's own (then it is misplaced, not misdirected)."""
    tree = parse(step.file) if is_user_file(step.file) else None
    if tree is None:
        return None
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
              and n.lineno <= step.line <= (n.end_lineno or n.lineno)]  # fmt: skip
    scope: ast.AST = max(scopes, key=lambda n: n.lineno) if scopes else tree
    calls = [(n, n.func) for n in ast.walk(scope) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "zero_grad"
             and n.lineno < step.line]  # fmt: skip
    if not calls:
        return None
    last, func = max(calls, key=lambda c: c[0].lineno)
    receiver = func.value if isinstance(func, ast.Attribute) else None
    scopes_ = (frame.f_locals, frame.f_globals) if frame is not None else ()
    owner = next((s[receiver.id] for s in scopes_ if isinstance(receiver, ast.Name)
                  and receiver.id in s), None)  # fmt: skip
    if isinstance(owner, nn.Module) and any(p is param for p in owner.parameters()):
        return None
    return Site(step.file, last.lineno)


def wording(u: Uncleared) -> tuple[str, str]:
    """(message, fix) for the finding.

    Example:
        >>> wording(Uncleared("g_optimizer", "G", ["d_optimizer"], None))[0][:60]
        "g_optimizer's gradients (G's parameters) are never cleared: "
    """
    opt = u.optimizer or "this optimizer"
    whose = f" ({u.model}'s parameters)" if u.model else ""
    if u.cleared:
        others = ", ".join(f"{n}.zero_grad()" for n in u.cleared)
        message = (f"{opt}'s gradients{whose} are never cleared: only {others} runs, so each "
                   f"{opt}.step() applies the sum of every gradient so far")  # fmt: skip
        fix = f"call {opt}.zero_grad() there as well (beside {others})"
    elif u.site is not None:
        message = (f"{opt}'s gradients{whose} are never cleared: the zero_grad() here "
                   f"clears another model's, so each {opt}.step() applies the sum of every "
                   "gradient so far")  # fmt: skip
        fix = f"clear the right gradients: {opt}.zero_grad()" + (
            f" (or {u.model}.zero_grad())" if u.model else "")
    else:
        message = (f"{opt}'s gradients{whose} are never cleared: each optimizer step applies "
                   "the sum of every gradient so far, not this batch's")  # fmt: skip
        fix = (f"call {opt}.zero_grad() once per step (before the backward, or right after "
               "this step); to accumulate on purpose, zero every N batches and step every N")
    return message, fix


def zeroed_by(optimizer: Any) -> tuple[str, Site | None]:
    """The user's name for ``optimizer`` and the line that called its ``zero_grad()``
    (asked from inside the call: the user's frame is on the stack)."""
    frame = user_frame(skip=2)
    return variable_name(optimizer, frame) or "", Site.of(frame)
