"""Who holds tensors with graphs: the user's variables and attributes worth measuring,
how much graph each holds, and the statement that stores into it."""

from __future__ import annotations

import ast
import functools
import types
from collections import deque
from typing import Any

import torch
from torch import nn

from trainwell.doctor.graph import walk as _walk
from trainwell.doctor.sites import is_user_file, parse


class Holder:
    """A user variable or attribute that holds tensors."""

    def __init__(self, name: str, value: Any, owner: str | None, cls: type | None) -> None:
        self.name = name  # the variable or attribute name
        self.value = value
        self.owner = owner  # the variable holding the object, for attributes
        self.cls = cls  # the object's class, for attributes
        self.carried = False
        self.key: Any = None  # held as name[key], not as name itself
        self.file: str | None = None  # the user's file whose variable it is, when known

    def describe(self) -> str:
        if self.key is not None and self.cls is not None:
            return f"`{self.owner}.{self.name}[{self.key!r}]` (in {_article(self.cls.__name__)})"
        if self.key is not None:
            return f"`{self.name}[{self.key!r}]`"
        if self.cls is None:
            return f"`{self.name}`"
        owner = _article(self.cls.__name__)
        return f"`{self.owner}.{self.name}` (attribute `{self.name}` of {owner})"


# Values that never hold the user's tensors: most of a script's globals (its imports,
# functions and classes), passed over before any closer look.
_NOT_HOLDERS = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
                types.MethodType, str, int, float, bool, type(None))  # fmt: skip


def holders(
    frame: types.FrameType | None, seen_objects: set[int], modules: tuple[dict, ...] = ()
) -> list[tuple[str, Holder]]:
    """The user's variables worth measuring, with a stable path for each: those of the
    user's frames on the stack from ``frame`` out, and the globals of ``modules`` (the
    user's modules whose code runs from the engine's frames: a step function's)."""
    found: list[tuple[str, Holder]] = []
    # id -> (variables, their file); frames of one file share their globals
    scopes: dict[int, tuple[dict[str, Any], str | None]] = {}
    f = frame
    while f is not None:
        file = f.f_code.co_filename
        if is_user_file(file):
            local = f.f_locals  # read once: each read copies the frame's variables
            scopes.setdefault(id(local), (local, file))
            scopes.setdefault(id(f.f_globals), (f.f_globals, file))
        f = f.f_back
    for module in modules:
        scopes.setdefault(id(module), (module, module.get("__file__")))
    for scope, scope_file in scopes.values():
        for name, value in list(scope.items()):
            if isinstance(value, _NOT_HOLDERS) or name.startswith("__"):
                continue
            if _holds_tensors(value):
                held = _held(name, name, value, None, None)
                for _, holder in held:
                    holder.file = scope_file
                found += held
            elif _is_user_object(value) and id(value) not in seen_objects:
                seen_objects.add(id(value))
                found += attributes(name, value, seen_objects)
    return found


def attributes(owner: str, obj: Any, seen: set[int]) -> list[tuple[str, Holder]]:
    found = []
    objects = [(owner, obj)]
    if isinstance(obj, nn.Module):
        objects = [(f"{owner}.{n}" if n else owner, m) for n, m in obj.named_modules()]
    for path, o in objects:
        seen.add(id(o))
        attrs = vars(o)
        skip = set()
        if isinstance(o, nn.Module):
            skip = set(o._parameters) | set(o._buffers)
            for hook in list(o._forward_hooks.values()):
                for cell_name, cell in zip(
                    hook.__code__.co_freevars if hasattr(hook, "__code__") else (),
                    getattr(hook, "__closure__", None) or (),
                ):
                    value = cell.cell_contents
                    if _holds_tensors(value):
                        holder = Holder(cell_name, value, None, None)
                        found.append((f"{path}<hook>.{cell_name}", holder))
        for name, value in attrs.items():
            if name.startswith("_") or name in skip:
                continue
            if _holds_tensors(value):
                found += _held(f"{path}.{name}", name, value, path, type(o))
    return found


def _held(
    path: str, name: str, value: Any, owner: str | None, cls: type | None
) -> list[tuple[str, Holder]]:
    """A holder for ``value``, and for the containers and tensors one level inside a
    dict of them (``history["loss"].append(loss)``, ``stats["total"] += loss``)."""
    found = [(path, Holder(name, value, owner, cls))]
    if isinstance(value, dict):
        for key, inner in list(value.items())[:100]:
            if isinstance(inner, (list, deque, dict)) or _has_graph(inner):
                holder = Holder(name, inner, owner, cls)
                holder.key = key
                found.append((f"{path}[{key!r}]", holder))
    return found


def _holds_tensors(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return not isinstance(value, nn.Parameter)  # (a Python-level check: tensors only)
    return isinstance(value, (list, tuple, dict, deque))


def _is_user_object(value: Any) -> bool:
    if isinstance(value, nn.Module):
        return True
    if not hasattr(value, "__dict__") or isinstance(value, (types.FunctionType, types.MethodType)):
        return False
    cls: type = type(value)  # a class (type[Any] reads as unhashable to mypy)
    return _is_user_class(cls)


@functools.lru_cache(maxsize=1024)
def _is_user_class(cls: type) -> bool:
    """Instances of classes defined in the user's files hold the user's state."""
    import sys

    mod = sys.modules.get(getattr(cls, "__module__", "") or "")
    return mod is not None and is_user_file(getattr(mod, "__file__", "") or "<>")


def grows(history: dict[str, deque[int]], path: str, size: int, steps: int) -> bool:
    """Record ``size``; True when it grew at each of the last ``steps`` observations."""
    hist = history.setdefault(path, deque(maxlen=steps + 1))
    hist.append(size)
    return len(hist) == hist.maxlen and all(b > a for a, b in zip(hist, list(hist)[1:]))


def bytes_held(value: Any) -> int:
    items = value.values() if isinstance(value, dict) else value
    return sum(v.element_size() * v.numel() for v in items if isinstance(v, torch.Tensor))


def _has_graph(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.grad_fn is not None


def nested_graph(item: Any) -> bool:
    if isinstance(item, (tuple, list)) and len(item) <= 16:
        return any(_has_graph(v) for v in item)
    if isinstance(item, dict) and len(item) <= 16:
        return any(_has_graph(v) for v in item.values())
    return False


def graph_size(root: Any, limit: int) -> int:
    return sum(1 for _ in _walk(root, limit))


def _user_files(holder: Holder) -> list[str]:
    import sys

    files = [holder.file] if holder.file else []
    if holder.cls is not None:
        mod = sys.modules.get(holder.cls.__module__)
        if mod is not None and getattr(mod, "__file__", None):
            files.append(mod.__file__ or "")
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__file__", None):
        files.append(main.__file__ or "")
    return [f for f in dict.fromkeys(files) if f and is_user_file(f)]


def store_site(holder: Holder, container: bool) -> tuple[str, int, int | None] | None:
    """The statement that stores into the holder, and where the stored tensor is made.
    A holder ``d[key]`` is looked for as ``d["key"]`` first, then as ``d[name]`` (a loop
    over the keys)."""
    for loose in (False, True) if holder.key is not None else (False,):
        for file in _user_files(holder):
            tree = parse(file)
            if tree is None:
                continue
            for node in ast.walk(tree):
                hit = _stores(node, holder, container, loose)
                if hit is not None:
                    stmt_line, value = hit
                    call = _helper_call(tree, holder, stmt_line, value)
                    if call is not None:
                        return call[0], call[1], stmt_line  # the fix goes at the call site
                    return file, stmt_line, _creation_line(tree, value, stmt_line)
    return None


def _helper_call(
    tree: ast.Module, holder: Holder, line: int, value: ast.AST | None
) -> tuple[str, int] | None:
    """A helper method (``AverageMeter.update(self, val, n)``) storing one of its own
    arguments: the caller's line (``meter.update(loss, n)``), where ``.item()`` goes."""
    if holder.cls is None or value is None:
        return None
    used = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or not fn.lineno <= line <= (fn.end_lineno or 0):
            continue
        if not used & {a.arg for a in fn.args.args[1:]}:
            return None
        for file in _user_files(holder):
            main = parse(file)
            for n in ast.walk(main) if main is not None else ():
                if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                        and n.func.attr == fn.name and n.args):  # fmt: skip
                    return file, n.lineno
    return None


def _target_matches(node: ast.AST, holder: Holder, loose: bool = False) -> bool:
    if holder.key is not None:
        inner = node.value if isinstance(node, ast.Subscript) else None
        named = (isinstance(inner, ast.Name) and inner.id == holder.name) or (
            holder.cls is not None
            and isinstance(inner, ast.Attribute)
            and inner.attr == holder.name
        )
        if not named:
            return False
        key = node.slice if isinstance(node, ast.Subscript) else None
        if isinstance(key, ast.Constant):
            return key.value == holder.key
        return loose  # d[name]: any key
    if holder.cls is None:
        return isinstance(node, ast.Name) and node.id == holder.name
    return isinstance(node, ast.Attribute) and node.attr == holder.name


def _stores(
    node: ast.AST, holder: Holder, container: bool, loose: bool = False
) -> tuple[int, ast.AST | None] | None:
    def matches(target: ast.AST) -> bool:
        return _target_matches(target, holder, loose)

    if container:
        # x.append(v), x.extend(v), x.insert(i, v), x += [v], x[k] = v
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend", "insert", "appendleft")
            and matches(node.func.value)
        ):
            return node.lineno, node.args[-1] if node.args else None
        if isinstance(node, ast.AugAssign) and matches(node.target):
            return node.lineno, node.value
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Subscript) and matches(t.value) for t in node.targets
        ):
            return node.lineno, node.value
        return None
    if isinstance(node, ast.AugAssign) and matches(node.target):
        return node.lineno, node.value
    if isinstance(node, ast.Assign):
        targets = [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        refers = any(matches(n) for n in ast.walk(node.value))
        if refers and any(matches(t) for t in targets):
            # h = f(x, h) carries state; total = total + loss accumulates.
            holder.carried = isinstance(node.value, ast.Call) or isinstance(
                node.targets[0], ast.Tuple
            )
            return node.lineno, node.value
    return None


def _creation_line(tree: ast.Module, value: ast.AST | None, before: int) -> int | None:
    """Where the stored variable was assigned last before ``before`` (e.g. ``loss = ...``)."""
    names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} if value else set()
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and node.lineno < before:
            for t in node.targets:
                for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(e, ast.Name) and e.id in names and node.lineno > (best or 0):
                        best = node.lineno
    return best


def _article(name: str) -> str:
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
