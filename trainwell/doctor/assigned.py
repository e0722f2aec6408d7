"""Where a value the user wrote is set: the source line behind an argument such as
``lr=lr`` or ``nn.Linear(64, num_classes)``, followed through a function's parameter to
its callers, a module constant, an ``argparse`` option or a config dict's key.

Source analysis only (nothing runs): each step is one lookup in the file's syntax tree,
and the chain stops after a few steps or where it cannot be told.
"""

from __future__ import annotations

import ast

from trainwell.doctor.source import call_name

DEPTH = 4  # steps followed: parameter -> caller's argument -> constant ...


def call_at(tree: ast.Module, line: int, names: tuple[str, ...]) -> ast.Call | None:
    """The call of one of ``names`` that spans ``line`` (the innermost)."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and call_name(n) in names
             and n.lineno <= line <= (n.end_lineno or n.lineno)]  # fmt: skip
    return min(calls, key=lambda n: (n.end_lineno or n.lineno) - n.lineno) if calls else None


def argument(call: ast.Call, keyword: str, position: int) -> ast.expr | None:
    """The expression passed as ``keyword`` (or at ``position``) to ``call``."""
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[position] if len(call.args) > position else None


def origin_lines(tree: ast.Module, expr: ast.expr, line: int) -> list[int]:
    """The lines where the value of ``expr`` (used at ``line``) is set, nearest first:
    ``[]`` for a literal (it is set where it is written) or when it cannot be told.

    Example:
        >>> src = "LR = 1.0\\ndef fit(m, lr):\\n    opt = SGD(m, lr=lr)\\nfit(net, lr=LR)\\n"
        >>> tree = ast.parse(src)
        >>> call = call_at(tree, 3, ("SGD",))
        >>> origin_lines(tree, argument(call, "lr", 1), 3)
        [4, 1]
    """
    found: list[int] = []
    for _ in range(DEPTH):
        step = _step(tree, expr, line)
        if step is None:
            break
        line, origin = step
        found.append(line)
        if origin is None:
            break
        expr = origin
    return found


def _step(tree: ast.Module, expr: ast.expr, line: int) -> tuple[int, ast.expr | None] | None:
    """One step back: (the line that sets ``expr``, the expression it is set from)."""
    if isinstance(expr, ast.Name):
        return _name_origin(tree, expr.id, line)
    if isinstance(expr, ast.Attribute):
        return _option_origin(tree, expr.attr)
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant):
        return _key_origin(tree, expr.slice.value)
    return None


def _name_origin(tree: ast.Module, name: str, line: int) -> tuple[int, ast.expr | None] | None:
    fn = _enclosing_function(tree, line)
    scope: ast.AST = fn if fn is not None else tree
    assigns = [n for n in ast.walk(scope) if isinstance(n, (ast.Assign, ast.AnnAssign))
               and n.lineno < line and n.value is not None and _assigns(n, name)]  # fmt: skip
    if assigns:
        last = max(assigns, key=lambda n: n.lineno)
        return last.lineno, _follow(last.value)
    if fn is not None:
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        if name in params:
            return _caller_argument(tree, fn, params.index(name), name)
    # A module constant used inside a function: assigned anywhere at module level.
    module = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
              and n.value is not None and _assigns(n, name)]  # fmt: skip
    if module:
        return module[-1].lineno, _follow(module[-1].value)
    return None


def _assigns(node: ast.Assign | ast.AnnAssign, name: str) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    names = [n for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return any(n.id == name for n in names)


def _follow(value: ast.expr | None) -> ast.expr | None:
    """What an assigned value comes from, when it names another value (an annotation
    with no value comes from nothing)."""
    return value if isinstance(value, (ast.Name, ast.Attribute, ast.Subscript)) else None


_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _enclosing_function(tree: ast.Module, line: int) -> _Function | None:
    fns = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
           and n.lineno <= line <= (n.end_lineno or n.lineno)]  # fmt: skip
    return max(fns, key=lambda n: n.lineno) if fns else None


def _caller_argument(
    tree: ast.Module, fn: _Function, index: int, name: str
) -> tuple[int, ast.expr | None] | None:
    """The call of ``fn`` (or of its class, for ``__init__``) that passes the parameter."""
    callee = fn.name
    if callee == "__init__":
        owner = next((c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                      and fn in c.body), None)  # fmt: skip
        if owner is None:
            return None
        callee, index = owner.name, index - 1  # self is not passed
    elif fn.args.args and fn.args.args[0].arg in ("self", "cls"):
        index -= 1
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and call_name(call) == callee:
            arg = argument(call, name, index)
            if arg is not None:
                return call.lineno, _follow(arg)
    return None


def _option_origin(tree: ast.Module, attr: str) -> tuple[int, ast.expr | None] | None:
    """``args.lr``: the ``add_argument("--lr", ...)``; ``cfg.lr``: a ``lr=`` keyword or
    a class attribute ``lr = 0.1`` (a config dataclass)."""
    flags = {f"--{attr}", f"--{attr.replace('_', '-')}"}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and call_name(node) == "add_argument"
                and any(isinstance(a, ast.Constant) and a.value in flags for a in node.args)):
            return node.lineno, None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and _assigns(stmt, attr):
                    return stmt.lineno, None
    return None


def _key_origin(tree: ast.Module, key: object) -> tuple[int, ast.expr | None] | None:
    """``cfg["lr"]``: the ``"lr": ...`` entry of a dict literal, or ``cfg["lr"] = ...``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == key:
                    return k.lineno, _follow(v)
        if isinstance(node, ast.Call) and call_name(node) == "dict":
            for kw in node.keywords:
                if kw.arg == key:
                    return kw.value.lineno, _follow(kw.value)
    return None
