"""Finding the line in the user's source where a fix goes: the assignment of a module's
attribute, the ``.detach()`` in a forward, the names of a model's parts."""

from __future__ import annotations

import ast
import types
from typing import TypeGuard

from torch import nn

from trainwell.doctor.sites import Site, is_user_file, parse


def call_name(node: ast.AST) -> str | None:
    """The name a call calls: ``sqrt`` of ``torch.sqrt(x)`` and of ``sqrt(x)``, ``item``
    of ``loss.item()``; ``None`` for anything else.

    Example:
        >>> [call_name(ast.parse(c, mode="eval").body) for c in ("torch.sqrt(x)", "f(1)", "x")]
        ['sqrt', 'f', None]
    """
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def module_path(path: str, root: str = "model") -> str:
    """A dotted ``named_modules`` path as the user writes it: ``1`` -> ``model[1]``,
    ``encoder.layers.0.attn`` -> ``encoder.layers[0].attn``; ``root`` is the model's
    name (the variable that holds it) and leads paths that start with an index.

    Example:
        >>> module_path("1"), module_path("encoder.layers.0.attn"), module_path("", "net")
        ('model[1]', 'encoder.layers[0].attn', 'net')
    """
    text = ""
    for part in path.split(".") if path else []:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return root + text if not text or text.startswith("[") else text


def module_label(path: str, module: nn.Module, root: str = "model") -> str:
    """``model[1] (LogFeatures)``, ``encoder.attn (MultiheadAttention)``: the path as the
    user writes it and the module's class; the model itself is ``root (Class)``."""
    return f"{module_path(path, root)} ({type(module).__name__})"


def param_path(name: str, root: str = "model") -> str:
    """A ``named_parameters`` name as the user writes it: ``1.weight`` ->
    ``model[1].weight``, ``head.bias`` -> ``head.bias``."""
    path, _, leaf = name.rpartition(".")
    return f"{module_path(path, root)}.{leaf}" if path else name


def qualified_names(model: nn.Module, root: str = "model") -> dict[int, str]:
    """``id(module) -> label`` (:func:`module_label`) for every module of ``model``."""
    names = {id(m): module_label(name, m, root) for name, m in model.named_modules() if name}
    names[id(model)] = module_label("", model, root)
    return names


def user_class(cls: type) -> tuple[str, ast.ClassDef] | None:
    """The file and syntax tree of ``cls`` when the user wrote it."""
    # The file comes from the class's own functions: a script run as __main__ is no
    # longer in sys.modules once it returns, where inspect would look for it.
    code = next((v.__code__ for v in vars(cls).values() if isinstance(v, types.FunctionType)), None)
    if code is None or not is_user_file(code.co_filename):
        return None
    file = code.co_filename
    tree = parse(file)
    if tree is None:
        return None
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    # Two classes of one name in a file: the one that holds the function.
    for node in classes:
        if node.lineno <= code.co_firstlineno <= (node.end_lineno or node.lineno):
            return file, node
    return (file, classes[0]) if classes else None


def _self_attribute(node: ast.AST, attr: str | None = None) -> TypeGuard[ast.Attribute]:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and (attr is None or node.attr == attr)
    )


def attribute_site(cls: type, attr: str, carried: bool = False) -> Site | None:
    """The line of ``self.<attr> = ...`` in ``cls`` (or a user base class), if any; with
    ``carried``, preferably one that feeds the attribute back (``y, self.h = f(x, self.h)``)."""
    first = None
    for klass in cls.__mro__:
        found = user_class(klass)
        if found is None:
            continue
        file, node = found
        for sub in ast.walk(node):
            if not isinstance(sub, (ast.Assign, ast.AnnAssign)) or sub.value is None:
                continue
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            if not any(_self_attribute(t, attr) for t in flat):
                continue
            site = Site(file, sub.lineno)
            if not carried or any(_self_attribute(n, attr) for n in ast.walk(sub.value)):
                return site
            first = first or site
    return first


def method(cls: type, name: str) -> tuple[str, ast.FunctionDef] | None:
    """The user's definition of ``cls.<name>`` (its own or a user base class's)."""
    for klass in cls.__mro__:
        if name not in vars(klass):
            continue
        found = user_class(klass)
        if found is None:
            return None
        file, node = found
        for sub in node.body:
            if isinstance(sub, ast.FunctionDef) and sub.name == name:
                return file, sub
        return None
    return None


def uses_attribute(cls: type, attr: str) -> bool | None:
    """Whether the user's ``forward`` of ``cls`` mentions ``self.<attr>``; ``None`` when
    it cannot be told (no source, or the forward reaches its parts some other way)."""
    found = method(cls, "forward")
    if found is None:
        return None
    _, fn = found
    names = [n for n in ast.walk(fn) if _self_attribute(n)]
    # getattr(self, ...) or iterating self.children(): the parts are not named.
    dynamic = any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr"
        for n in ast.walk(fn)
    )
    if dynamic:
        return None
    return any(n.attr == attr for n in names)


def graph_cut_site(cls: type) -> Site | None:
    """The first ``.detach()`` / ``.data`` / ``torch.no_grad()`` in the user's ``forward``
    of ``cls``: where gradients stop flowing to the layers before it."""
    found = method(cls, "forward")
    if found is None:
        return None
    file, fn = found
    lines = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Attribute) and n.attr in ("detach", "data", "detach_", "no_grad"):
            lines.append(n.lineno)
    return Site(file, min(lines)) if lines else None
