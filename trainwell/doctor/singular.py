"""Where a gradient went NaN/Inf while the loss stayed finite: an operation whose
gradient is singular at a finite input (``sqrt`` at 0, ``acos`` at 1; torch's norms
take a zero subgradient at 0), found in the loss's graph by its node, then in the
user's source by its call."""

from __future__ import annotations

import ast
from typing import Any, TypeGuard

from trainwell.doctor.graph import walk
from trainwell.doctor.nonfinite import guarded
from trainwell.doctor.sites import Site, parse
from trainwell.doctor.source import call_name

# Backward nodes whose gradient is infinite at a finite input -> the calls that make them.
_SINGULAR = {
    "SqrtBackward0": ("sqrt",),
    "RsqrtBackward0": ("rsqrt",),
    "AcosBackward0": ("acos", "arccos"),
    "AsinBackward0": ("asin", "arcsin"),
    "PowBackward0": ("pow", "**"),
}


def singular_site(loss: Any, backward: Site) -> Site | None:
    """The line of the singular operation the loss went through, nearest before the
    backward (in the backward's file), unless it is already kept off its edge
    (``sqrt(x + eps)``); ``None`` when there is none."""
    root = getattr(loss, "grad_fn", None)
    if root is None:
        return None
    names = {n for node in walk(root, 5000) for n in _SINGULAR.get(type(node).__name__, ())}
    tree = parse(backward.file) if names else None
    if tree is None:
        return None
    lines = sorted(n.lineno for n in ast.walk(tree) if _call_named(n, names))
    before = [line for line in lines if line <= backward.line]
    if not lines:
        return None
    return Site(backward.file, before[-1] if before else lines[0])


def _call_named(node: ast.AST, names: set[str]) -> TypeGuard[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        exponent = node.right
        return "**" in names and isinstance(exponent, ast.Constant) and (
            isinstance(exponent.value, float) and 0 < exponent.value < 1
        )
    return isinstance(node, ast.Call) and call_name(node) in names and not guarded(node)
