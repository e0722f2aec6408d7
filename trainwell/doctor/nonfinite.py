"""Where a NaN or Inf comes from: the first module whose output is not finite (a
replay of the forward), the loss assignment, the risky line of a forward."""

from __future__ import annotations

import ast
import math
import random
import sys
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from trainwell.doctor.events import Reporter
from trainwell.doctor.graph import walk as _walk
from trainwell.doctor.sites import Site, parse, user_frame
from trainwell.doctor.source import call_name


def float_tensors(
    value: Any, out: list[torch.Tensor] | None = None, depth: int = 0
) -> list[torch.Tensor]:
    """The floating-point tensors in ``value`` (nested tuples, lists and dicts)."""
    out = [] if out is None else out
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            float_tensors(v, out, depth)
    elif isinstance(value, dict):
        for v in value.values():
            float_tensors(v, out, depth)
    elif depth < 2 and hasattr(value, "__dict__") and not isinstance(value, (type, nn.Module)):
        for v in vars(value).values():  # a batch object of the user's (a dataclass)
            float_tensors(v, out, depth + 1)
    return out


def all_finite(tensors: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.numel())


def _nonfinite_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(_nonfinite_scalar(v) for v in value)
    if isinstance(value, dict):
        return any(_nonfinite_scalar(v) for v in value.values())
    return False


class _Origin(TorchFunctionMode):
    """Records the first operation that makes a non-finite value out of finite ones, the
    user's line that ran it and the module it ran in."""

    def __init__(self, names: dict[int, str]) -> None:
        super().__init__()
        self.names = names
        self.modules: list[str] = []  # the module call stack, by qualified name
        self.found: dict[str, Any] | None = None

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        kwargs = kwargs or {}
        # The inputs are judged before the call: an in-place op overwrites them. An op
        # given an infinite number on purpose (masked_fill(mask, -inf), a causal mask
        # made with torch.full) is not where a NaN begins.
        clean = self.found is None and all_finite(float_tensors((args, kwargs)))
        clean = clean and not _nonfinite_scalar((args, kwargs))
        out = func(*args, **kwargs)
        if clean:
            produced = float_tensors(out)
            if produced and not all_finite(produced):
                site = Site.of(user_frame(start=sys._getframe(1)))
                self.found = {
                    "op": getattr(func, "__name__", str(func)),
                    "module": self.modules[-1] if self.modules else "",
                    "site": site,
                }
        return out


def replay(
    doc: Reporter, model: nn.Module, args: tuple, kwargs: dict, autocast: Any,
    names: dict[int, str],
) -> tuple[dict[str, Any] | None, bool]:
    """Run the forward again on the same inputs and find the first non-finite operation;
    also whether the output came out finite.

    Nothing of the run changes: no graph is built, the RNG state and the buffers
    (BatchNorm statistics) are put back, and the doctor hears no events meanwhile.
    """
    # Batch norm in training mode would update its statistics in place, bumping their
    # version: the user's backward, about to run, would refuse them. Without tracking it
    # normalizes with the batch's statistics just the same and writes nothing.
    norms = [m for m in model.modules()
             if isinstance(m, nn.modules.batchnorm._NormBase) and m.training
             and m.track_running_stats]  # fmt: skip
    saved = _SavedState(model)
    mode = _Origin(names)

    def enter(module: nn.Module, inputs: Any) -> None:
        mode.modules.append(names.get(id(module), type(module).__name__))

    def leave(module: nn.Module, inputs: Any, output: Any) -> None:
        mode.modules.pop()  # a hook's return value would replace the output

    hooks = [
        nn.modules.module.register_module_forward_pre_hook(enter),
        nn.modules.module.register_module_forward_hook(leave),
    ]
    for m in norms:
        m.track_running_stats = False
    try:
        with doc.muted(), torch.no_grad():
            cast = torch.autocast(autocast[0], dtype=autocast[1]) if autocast else None
            with mode, cast if cast is not None else _nothing():
                output = model(*args, **kwargs)
        finite_output = all_finite(float_tensors(output))
    except Exception:
        return None, True  # a replay that fails explains nothing; never disturb the run
    finally:
        for h in hooks:
            h.remove()
        for m in norms:
            m.track_running_stats = True
        saved.restore()
    return mode.found, finite_output


class _SavedState:
    """The buffers and every RNG a replay may touch, to put back after it."""

    def __init__(self, model: nn.Module) -> None:
        self.buffers = [(b, b._version, b.detach().clone()) for b in model.buffers()]
        self.rng = torch.get_rng_state()
        # A model may draw from Python's or NumPy's RNG (layerdrop).
        self.py_rng = random.getstate()
        self.np_rng = numpy_rng()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def restore(self) -> None:
        for b, version, saved in self.buffers:
            # Only what the replay changed (a custom module's own state): writing a buffer
            # bumps its version, and one the graph saved would fail the user's backward.
            if b._version != version:
                b.copy_(saved)
        torch.set_rng_state(self.rng)
        random.setstate(self.py_rng)
        if self.np_rng is not None:
            import numpy

            numpy.random.set_state(self.np_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)


def numpy_rng() -> Any:
    numpy = sys.modules.get("numpy")
    return numpy.random.get_state() if numpy is not None else None


def nan_data_in_graph(loss: torch.Tensor, limit: int = 2000) -> bool:
    """Whether the loss's graph saved a data tensor (no history, e.g. the targets)
    holding NaN."""
    if loss.grad_fn is None:
        return False
    for node in _walk(loss.grad_fn, limit):
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            try:
                value = getattr(node, name)
            except RuntimeError:  # freed, or not a tensor
                continue
            if (isinstance(value, torch.Tensor) and value.grad_fn is None
                    and not value.requires_grad and value.is_floating_point()
                    and bool(torch.isnan(value).any())):  # fmt: skip
                return True
    return False


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _backwarded_name(tree: ast.Module, line: int) -> str | None:
    """The variable ``.backward()`` is called on at ``line`` (``loss`` in
    ``loss.backward()`` and in ``scaler.scale(loss).backward()``)."""
    name = None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node, "lineno", 0) == line):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "backward":
            target = func.value
            if isinstance(target, ast.Call) and target.args:
                target = target.args[0]
            if isinstance(target, ast.Name):
                name = target.id
    return name


def loss_assignment(backward: Site) -> Site | None:
    """The statement that computed the tensor ``backward`` was called on (``loss = ...``
    before ``loss.backward()`` in the same function)."""
    tree = parse(backward.file)
    if tree is None:
        return None
    name = _backwarded_name(tree, backward.line)
    if name is None:
        return None
    assigns = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        and node.lineno < backward.line
        and any(
            isinstance(t, ast.Name) and t.id == name
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
    ]
    if not assigns:
        return None
    assign = max(assigns, key=lambda n: n.lineno)
    # loss = my_loss(out, y), with my_loss defined in this file: the line is in there.
    value = assign.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == value.func.id:
                return Site(backward.file, _risky_line(node))
    return Site(backward.file, assign.lineno)


def guarded(call: ast.Call) -> bool:
    """A call whose argument is kept in range: log(p.clamp(min=1e-7)), sqrt(x + eps)."""
    for node in ast.walk(ast.Tuple(elts=list(call.args), ctx=ast.Load())):
        if call_name(node) in ("clamp", "clamp_min", "clip", "maximum", "max", "abs", "softplus"):
            return True
        if isinstance(node, ast.Name) and "eps" in node.id.lower():
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and (
            isinstance(node.right, ast.Constant) or isinstance(node.left, ast.Constant)
        ):
            return True
    return False


_RISKY = {"log", "log2", "log10", "sqrt", "rsqrt", "pow", "exp", "div", "acos", "asin",
          "reciprocal", "log1p"}  # fmt: skip


def _risky_line(fn: ast.FunctionDef) -> int:
    """The first line of ``fn`` with an operation that makes NaN/Inf at the edge of its
    domain (log, sqrt, a division, ...), else its last ``return``."""
    calls = [
        n.lineno
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and call_name(n) in _RISKY
        and not guarded(n)
    ]
    divisions = [
        n.lineno
        for n in ast.walk(fn)
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.Pow))
    ]
    # exp/log/sqrt are where NaN usually starts; a division by a constant rarely is.
    if calls or divisions:
        return min(calls or divisions)
    returns = [n.lineno for n in ast.walk(fn) if isinstance(n, ast.Return)]
    return max(returns) if returns else fn.lineno


def finite_norms(grads: list[torch.Tensor]) -> bool:
    """Whether every gradient is finite: the max-abs norm, which (unlike the 2-norm) does
    not overflow on large finite values and is NaN when any element is. One fused norm
    and one read when the gradients share a device and a dtype (the common case)."""
    norms: Sequence[torch.Tensor]
    try:
        norms = torch._foreach_norm(grads, float("inf"))
    except (RuntimeError, TypeError):
        norms = [g.abs().max() for g in grads]
    try:
        return bool(torch.isfinite(torch.stack(norms)).all())
    except RuntimeError:  # devices or dtypes differ
        return bool(torch.isfinite(torch.stack([n.float().cpu() for n in norms])).all())


def float_param_device(module: nn.Module) -> torch.device | None:
    """The device of the module's first floating-point parameter, if it has one."""
    for p in module.parameters():
        if p.is_floating_point():
            return p.device
    return None
