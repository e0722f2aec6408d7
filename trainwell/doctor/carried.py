"""Which state a failing backward reaches from an earlier step, and which in-place
operation changed a tensor autograd saved: the analysis behind two crash explanations.

The doctor records, cheaply, the autograd sequence number of the last loss backwarded
before the last optimizer step (nodes numbered at or below it were made in an earlier
step) and the inputs of the step's training forwards. A graph node numbered
below that mark and reached from this step's forward is state carried across steps;
the variable or attribute that holds it is named from executed lines only: the
forward's own call (``out, hidden = model(x, hidden)``) or a model attribute.
"""

from __future__ import annotations

import ast
import re
import types
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from trainwell.doctor.events import Reporter
from trainwell.doctor.graph import walk
from trainwell.doctor.records import ForwardRecord
from trainwell.doctor.sites import Site, is_user_file
from trainwell.doctor.source import attribute_site, parse

GRAPH_LIMIT = 20_000
INPLACE = "modified by an inplace operation"
_SHAPE = re.compile(r"\[torch\.\w+ \[([\d, ]*)\]\]")
_PRODUCER = re.compile(r"output \d+ of (\w+)")
_VERSION = re.compile(r"is at version (\d+)")


class Watched(Reporter, Protocol):
    """What the crash explanations read of the doctor, besides what a probe may: the
    autograd marks of the last steps, the last forward and the modules it has seen."""

    seq_before_step: int  # sequence number of the last loss backwarded before the step
    last_forward: ForwardRecord | None
    last_backward: Any  # a weak reference to the last tensor backwarded

    def seen_modules(self) -> list[nn.Module]: ...


@dataclass
class Carried:
    """A state carried across steps: how the user names it and where it is fed back."""

    name: str
    site: Site
    attribute: bool = False  # kept on a module (``self.h``) rather than passed in
    kind: str = "tensor"  # its structure, for a detach that runs: see state_kind


def _seq(node: Any) -> int:
    try:
        return int(node._sequence_nr())
    except (AttributeError, RuntimeError):
        return 1 << 62  # not a node autograd numbers (an AccumulateGrad of a leaf)


def _old_graph(t: Any, mark: int) -> bool:
    """Whether ``t``'s graph holds a node made before the step's mark."""
    fn = getattr(t, "grad_fn", None)
    if fn is None or mark < 0:
        return False
    nodes = walk(fn, GRAPH_LIMIT)
    return any(_seq(n) <= mark for n in nodes if type(n).__name__ != "AccumulateGrad")


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value[:8] if isinstance(v, torch.Tensor)]
    return []


def find_carried(doc: Watched) -> Carried | None:
    """The state fed from an earlier step's graph into this step's, or ``None``."""
    mark = doc.seq_before_step
    for record in doc.step_forwards:
        if record.steps != doc.steps:
            break
        for index, seq in record.inputs:
            if seq <= mark:
                name = _argument_name(record.file, record.line, index)
                if name is not None:
                    kind = state_kind(record.args[index] if index < len(record.args) else None)
                    return Carried(name, Site(record.file, record.line), kind=kind)
    return _carried_attribute(doc, mark)


def _argument_name(file: str, line: int, index: int) -> str | None:
    """The source text of positional argument ``index`` of the call on ``line``."""
    tree = parse(file)
    if tree is None or not is_user_file(file):
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line
             <= (n.end_lineno or n.lineno) and len(n.args) > index]  # fmt: skip
    # The innermost call that spans the line: the model's, not a wrapper around it.
    calls.sort(key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    for call in calls:
        arg = call.args[index]
        if isinstance(arg, (ast.Name, ast.Attribute, ast.Subscript)):
            return ast.unparse(arg)
    return None


def _carried_attribute(doc: Watched, mark: int) -> Carried | None:
    """A module attribute (``self.hidden``) whose graph reaches an earlier step."""
    for model in doc.seen_modules():
        for module in model.modules():
            for attr, value in list(vars(module).items()):
                if attr.startswith("_") or isinstance(value, nn.Parameter):
                    continue
                if not any(_old_graph(t, mark) for t in _tensors(value)):
                    continue
                site = attribute_site(type(module), attr, carried=True)
                if site is not None:
                    return Carried(f"self.{attr}", site, attribute=True, kind=state_kind(value))
    return None


def state_kind(value: Any) -> str:
    """The structure of a carried state: ``tensor`` (a GRU's ``h``), ``tuple`` /
    ``list`` of tensors (an LSTM's ``(h, c)``), ``nested`` (a list of per-layer
    ``(h, c)`` tuples), or ``other``.

    Example:
        >>> state_kind((torch.zeros(1), torch.zeros(1))), state_kind([(torch.zeros(1),)])
        ('tuple', 'nested')
    """
    if isinstance(value, torch.Tensor) or value is None:
        return "tensor"
    if isinstance(value, (tuple, list)) and value:
        if all(isinstance(v, torch.Tensor) for v in value):
            return type(value).__name__ if type(value) in (tuple, list) else "tuple"
        if all(isinstance(v, (tuple, list)) for v in value):
            return "nested"
    return "other"


def detach_statement(name: str, kind: str) -> str:
    """A statement that detaches a state of that structure and runs: ``h.detach()``
    does not exist on an LSTM's ``(h, c)`` tuple.

    Example:
        >>> detach_statement("states", "tuple")
        'states = tuple(s.detach() for s in states)'
    """
    if kind == "tuple":
        return f"{name} = tuple(s.detach() for s in {name})"
    if kind == "list":
        return f"{name} = [s.detach() for s in {name}]"
    if kind == "nested":
        return f"{name} = [tuple(s.detach() for s in layer) for layer in {name}]"
    if kind == "other":  # word_language_model's repackage_hidden, which recurses
        return (f"{name} = repackage_hidden({name}), with def repackage_hidden(h): return "
                "h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) "
                "for v in h)")  # fmt: skip
    return f"{name} = {name}.detach()"


def detach_fix(carried: Carried) -> str:
    """The line that cuts the carried state off from the previous step's graph."""
    tail = " (truncated BPTT)" if carried.kind == "tensor" else ""
    statement = detach_statement(carried.name, carried.kind)
    return f"detach the carried state each step: {statement}{tail}"


# ---- in-place modification of a saved tensor -----------------------------------------------


@dataclass
class Modified:
    """What the error says about the tensor changed in place."""

    shape: tuple[int, ...]
    producer: str  # the op that made it ("Sigmoid", "AsStrided" for a weight's view)
    node: str  # the backward node whose saved tensor is stale ("" when not found)
    version: int | None = None  # the tensor's version counter now ("is at version N")


def parse_modified(text: str, loss: torch.Tensor | None) -> Modified:
    m = _SHAPE.search(text)
    shape = tuple(int(s) for s in m.group(1).split(",") if s.strip()) if m else ()
    p = _PRODUCER.search(text)
    # Older torch names the node ("AsStridedBackward0"), newer the op ("AsStrided").
    producer = re.sub(r"Backward\d*$", "", p.group(1)) if p else ""
    v = _VERSION.search(text)
    return Modified(shape, producer, _stale_node(loss), int(v.group(1)) if v else None)


def _stale_node(loss: torch.Tensor | None) -> str:
    """The node of the failing graph whose saved tensor changed: reading it raises."""
    if loss is None or loss.grad_fn is None:
        return ""
    for node in walk(loss.grad_fn, GRAPH_LIMIT):
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                getattr(node, attr)
            except RuntimeError as exc:
                if INPLACE in str(exc):
                    return type(node).__name__
            except Exception:  # noqa: BLE001 - an attribute autograd cannot show
                continue
    return ""


def modified_parameter(frame: types.FrameType, mod: Modified) -> tuple[str, Any] | None:
    """The optimizer (its variable name) holding a parameter of the modified shape, and
    of its version now when the error says it (two networks of a GAN can share shapes)."""
    if mod.producer not in ("", "AsStrided", "T", "Transpose", "Permute"):
        return None
    shapes = {mod.shape, tuple(reversed(mod.shape))}

    def fits(p: torch.Tensor) -> bool:
        return tuple(p.shape) in shapes and mod.version in (None, p._version)

    for scope in _scopes(frame):
        for name, value in list(scope.items()):
            if isinstance(value, torch.optim.Optimizer) and any(
                fits(p) for group in value.param_groups for p in group["params"]
            ):
                return name, value
    return None


def _scopes(frame: types.FrameType) -> list[dict[str, Any]]:
    scopes: list[dict[str, Any]] = []
    f: types.FrameType | None = frame
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            scopes += [f.f_locals, f.f_globals]
        f = f.f_back
    return scopes


def step_line(frame: types.FrameType, optimizer_name: str) -> int | None:
    """The ``<optimizer>.step()`` line before the crash in the crashing function."""
    tree = parse(frame.f_code.co_filename)
    if tree is None:
        return None
    best = None
    for n in ast.walk(tree):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "step" and ast.unparse(n.func.value) == optimizer_name
                and n.lineno < frame.f_lineno):  # fmt: skip
            best = max(best or 0, n.lineno)
    return best


_INPLACE_METHODS = re.compile(
    r"^(?!requires_grad_|zero_grad|share_memory_)[a-z][a-z0-9_]*[a-z0-9]_$"
)


def inplace_line(frame: types.FrameType, first: int) -> int | None:
    """The first in-place statement on a tensor in the crashing function from ``first``
    to the crash: ``x += ...``, ``x.mul_(...)``, ``x[mask] = ...``."""
    tree = parse(frame.f_code.co_filename)
    if tree is None:
        return None
    fn = _enclosing(tree, frame.f_lineno)
    scope = {**frame.f_globals, **frame.f_locals}
    hits = []
    for n in ast.walk(fn):
        line = getattr(n, "lineno", 0)
        if not first <= line < frame.f_lineno:
            continue
        target = _inplace_target(n)
        if target is not None and _is_tensor_expr(target, scope):
            hits.append(line)
    return min(hits) if hits else None


def _inplace_target(n: ast.AST) -> ast.AST | None:
    if isinstance(n, ast.AugAssign):
        return n.target.value if isinstance(n.target, ast.Subscript) else n.target
    if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Subscript):
        return n.targets[0].value
    if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and _INPLACE_METHODS.match(n.func.attr)):  # fmt: skip
        return n.func.value
    return None


def _is_tensor_expr(node: ast.AST, scope: dict[str, Any]) -> bool:
    if isinstance(node, ast.Name):
        return isinstance(scope.get(node.id), torch.Tensor)
    return isinstance(node, (ast.Attribute, ast.Subscript, ast.Call))


def _enclosing(tree: ast.Module, line: int) -> ast.AST:
    best: ast.AST = tree
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= line <= (
            n.end_lineno or n.lineno
        ):
            best = n
    return best


def _norm(name: str) -> str:
    return name.lower().replace("_", "").removesuffix("backward0").removesuffix("backward")


class _InplaceRecorder(torch.overrides.TorchFunctionMode):
    """Records the user's line of every in-place op during a replayed forward whose
    target was made by ``producer`` (or that is ``producer`` itself)."""

    def __init__(self, producer: str) -> None:
        super().__init__()
        self.producer = _norm(producer)
        self.lines: list[Site] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        inplace = kwargs.get("inplace") is True or name in ("__iadd__", "__isub__", "__imul__",
                                                            "__itruediv__", "__setitem__") or (
            name.endswith("_") and not name.startswith("_"))  # fmt: skip
        if inplace and args and isinstance(args[0], torch.Tensor):
            made = _norm(type(args[0].grad_fn).__name__) if args[0].grad_fn is not None else ""
            if self.producer and self.producer in (made, _norm(name)) or not self.producer:
                site = _user_site()
                if site is not None:
                    self.lines.append(site)
        return func(*args, **kwargs)


def _user_site() -> Site | None:
    import sys

    f: types.FrameType | None = sys._getframe(2)
    while f is not None and not is_user_file(f.f_code.co_filename):
        f = f.f_back
    return Site(f.f_code.co_filename, f.f_lineno) if f is not None else None


def replay_inplace(doc: Watched, producer: str) -> Site | None:
    """Run the last training forward again, recording in-place ops on the tensor kind
    the error names; the script has crashed, so changing the model's state is harmless."""
    record = doc.last_forward
    if record is None:
        return None
    module, args = record.module, record.args
    recorder = _InplaceRecorder(producer)
    try:
        with doc.muted(), recorder:
            module(*args)
    except Exception:  # noqa: BLE001 - a replay that fails explains nothing
        return None
    return recorder.lines[0] if recorder.lines else None
