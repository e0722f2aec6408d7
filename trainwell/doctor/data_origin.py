"""Where a DataLoader's NaN/Inf is made, for ``nonfinite-input``: the transform (a
per-pixel standardization dividing by a zero std, in a Dataset's ``__getitem__``, a
transform class or a lambda) or the line that computed a precomputed tensor, rather
than the ``for`` over the loader that received it.

Tried in order, each only when the one before finds nothing:

1. a few samples are fetched again (``dataset[i]``, muted, the RNGs put back) under a
   :class:`~torch.overrides.TorchFunctionMode` that records the first operation making
   a non-finite value out of finite tensors, at the user's line that ran it;
2. the source of the transform and of ``__getitem__``: their first division or
   operation at the edge of its domain (numpy's, invisible to torch);
3. a ``TensorDataset`` of precomputed tensors: the assignment of the user's variable
   holding the non-finite one (``X = (X - mean) / std``).
"""

from __future__ import annotations

import ast
import random
import sys
import time
import types
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from trainwell.doctor.nonfinite import all_finite, float_tensors, guarded, numpy_rng
from trainwell.doctor.sites import Site, is_user_file, parse, user_frame, variable_site
from trainwell.doctor.source import call_name, method, user_class

SAMPLES = 32  # samples fetched again at most
BUDGET_S = 0.5  # and for this long at most


def data_origin(doc: Any, loader: Any) -> Site | None:
    """The user's line that makes the NaN/Inf of the DataLoader iterator ``loader``'s
    dataset, or ``None`` when it cannot be told."""
    dataset = getattr(loader, "_dataset", None)
    if dataset is None:
        return None
    try:
        site = _traced(doc, dataset)
    except Exception:  # fetching a sample failed: it explains nothing, disturb nothing
        site = None
    return site or _in_source(dataset) or _precomputed(dataset)


class _FirstNaN(TorchFunctionMode):
    """The first operation that turns finite float tensors into a non-finite one; ops
    that only wrap data (``torch.tensor(array)``, ``from_numpy``) take no tensor in and
    are where the data already was bad, not a transform."""

    def __init__(self, outside: set[tuple[str, int]]) -> None:
        super().__init__()
        self.outside = outside  # the lines on the stack around the fetch: not inside it
        self.site: Site | None = None

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        kwargs = kwargs or {}
        inputs = float_tensors((args, kwargs)) if self.site is None else []
        clean = bool(inputs) and all_finite(inputs)
        out = func(*args, **kwargs)
        if clean:
            produced = float_tensors(out)
            if produced and not all_finite(produced):
                site = Site.of(user_frame(start=sys._getframe(1)))
                if site is not None and (site.file, site.line) not in self.outside:
                    self.site = site
        return out


def _traced(doc: Any, dataset: Any) -> Site | None:
    n = len(dataset) if hasattr(dataset, "__len__") else 0
    outside = set()
    f: types.FrameType | None = sys._getframe(1)
    while f is not None:
        outside.add((f.f_code.co_filename, f.f_lineno))
        f = f.f_back
    mode = _FirstNaN(outside)
    rng = (torch.get_rng_state(), random.getstate(), numpy_rng())
    start = time.perf_counter()
    try:
        with doc.muted(), torch.no_grad(), mode:
            for i in range(min(n, SAMPLES)):
                dataset[i]
                if mode.site is not None or time.perf_counter() - start > BUDGET_S:
                    break
    finally:
        torch.set_rng_state(rng[0])
        random.setstate(rng[1])
        if rng[2] is not None:
            import numpy

            numpy.random.set_state(rng[2])
    return mode.site


def _in_source(dataset: Any) -> Site | None:
    """The first risky line of the dataset's transform, then of its ``__getitem__``."""
    candidates = [v for v in vars(dataset).values() if callable(v)
                  and not isinstance(v, (type, torch.Tensor))]  # fmt: skip
    for fn in candidates:
        site = _risky_in(fn)
        if site is not None:
            return site
    found = method(type(dataset), "__getitem__")
    if found is not None:
        line = _risky_line(found[1])
        if line is not None:
            return Site(found[0], line)
    return None


def _risky_in(fn: Any) -> Site | None:
    """A user function or lambda, or an object of a user class with ``__call__``."""
    if isinstance(fn, types.FunctionType):
        code = fn.__code__
        tree = parse(code.co_filename) if is_user_file(code.co_filename) else None
        nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda))
                 and n.lineno == code.co_firstlineno] if tree is not None else []  # fmt: skip
        line = next((ln for n in nodes if (ln := _risky_line(n)) is not None), None)
        return Site(code.co_filename, line) if line is not None else None
    if user_class(type(fn)) is not None:
        found = method(type(fn), "__call__")
        line = _risky_line(found[1]) if found is not None else None
        return Site(found[0], line) if found is not None and line is not None else None
    return None


_RISKY = {"log", "log2", "log10", "sqrt", "rsqrt", "div", "true_divide", "reciprocal"}


def _risky_line(fn: ast.AST) -> int | None:
    """The first unguarded division, log or sqrt in ``fn``, or ``None``."""
    lines = [n.lineno for n in ast.walk(fn)
             if (isinstance(n, ast.Call) and call_name(n) in _RISKY and not guarded(n))
             or (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)
                 and not isinstance(n.right, ast.Constant) and not _eps(n.right))]  # fmt: skip
    return min(lines) if lines else None


def _eps(node: ast.expr) -> bool:
    """A divisor kept off zero: ``std + 1e-8``, ``std.clamp(min=...)``, ``max(std, eps)``."""
    return guarded(ast.Call(func=ast.Name("f"), args=[node], keywords=[]))


def _precomputed(dataset: Any) -> Site | None:
    """A ``TensorDataset``'s non-finite tensor, by the user's variable that holds it."""
    bad = [t for t in getattr(dataset, "tensors", ()) if isinstance(t, torch.Tensor)
           and t.is_floating_point() and not all_finite([t])]  # fmt: skip
    if not bad:
        return None
    return variable_site(sys._getframe(1), lambda v: any(v is t for t in bad), _made)


def _made(file: str, name: str) -> int | None:
    """The assignment of ``name`` that divides or takes a log/sqrt, else its last."""
    tree = parse(file)
    assigns = [n for n in (ast.walk(tree) if tree is not None else ())
               if isinstance(n, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]  # fmt: skip
    risky = [n.lineno for n in assigns if _risky_line(n) is not None]
    lines = risky or [n.lineno for n in assigns]
    return max(lines) if lines else None
