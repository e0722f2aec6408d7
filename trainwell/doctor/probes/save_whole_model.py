"""The ``save-whole-model`` probe."""

from __future__ import annotations

import ast
from typing import Any

import torch
from torch import nn

from trainwell.doctor.codes import severity
from trainwell.doctor.events import CallEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import is_user_file, parse
from trainwell.doctor.source import call_name

CODE = "save-whole-model"
DEPTH = 3  # nesting of dicts/lists looked into: {"models": {"G": G}} is two


def pickled_objects(obj: Any, keys: tuple = (), depth: int = DEPTH) -> list[tuple[tuple, Any]]:
    """(keys, object) of the modules and optimizers ``obj`` holds itself, in dicts,
    lists and tuples down to ``depth``: what ``torch.save`` would pickle whole.

    Example:
        >>> net = nn.Linear(2, 2)
        >>> [k for k, _ in pickled_objects({"model": net, "state": net.state_dict()})]
        [('model',)]
    """
    if isinstance(obj, torch.jit.ScriptModule):
        return []  # a TorchScript module is code and weights, made to be saved (jit.save)
    if isinstance(obj, (nn.Module, torch.optim.Optimizer)):
        return [(keys, obj)]
    if depth <= 0:
        return []
    if isinstance(obj, dict):
        items: Any = list(obj.items())[:64]
    elif isinstance(obj, (list, tuple)):
        items = list(enumerate(obj[:64]))
    else:
        return []
    found = []
    for key, value in items:
        found += pickled_objects(value, (*keys, key), depth - 1)
    return found


class SaveWholeModelProbe:
    """``save-whole-model``: ``torch.save`` called by the user's code on a module or an
    optimizer itself (or a checkpoint dict holding one), not on its ``state_dict()``.
    The pickle stores a reference to the class by its import path: it loads only where
    the same code sits at the same place, and ``torch.load(weights_only=True)`` (the
    default since PyTorch 2.6) refuses it."""

    def on_call(self, doc: Reporter, event: CallEvent) -> None:
        if event.name != "save":
            return
        frame = event._frame
        if frame is None or not is_user_file(frame.f_code.co_filename):
            return  # a library's own torch.save (the engine's checkpoints)
        obj = event.args[0] if event.args else event.kwargs.get("obj")
        found = pickled_objects(obj)
        if not found:
            return
        keys, first = found[0]
        where = _saved_name(frame, keys)
        kind = "optimizer" if isinstance(first, torch.optim.Optimizer) else "module"
        names = [_saved_name(frame, k) for k, _ in found]
        more = f" (and {', '.join(f'`{n}`' for n in names[1:4])})" if len(names) > 1 else ""
        doc.add(
            Finding(
                code=CODE,
                severity=severity(CODE),
                file=frame.f_code.co_filename,
                line=frame.f_lineno,
                message=f"torch.save pickles the whole {kind} `{where}` "
                f"({type(first).__name__}){more}, not its state_dict",
                why="a pickled module stores its class by import path: the file loads only "
                "with the same code at the same place, breaks when the class is renamed or "
                "moved, and torch.load(weights_only=True), PyTorch's default, refuses it",
                fix=f"save `{where}.state_dict()` (a checkpoint dict of state_dicts: "
                "{'model': model.state_dict(), 'optimizer': optimizer.state_dict(), "
                "'epoch': epoch}); load with model.load_state_dict(torch.load(path))",
                related=_built_at(frame),
                evidence={"saved": names,
                          "classes": [type(o).__name__ for _, o in found]},  # fmt: skip
            )
        )


def _saved_name(frame: Any, keys: tuple) -> str:
    """How the user's code names what is pickled: ``model``, ``self.net``,
    ``ckpt['model']``, or the value written in a dict literal (``{'model': net}``:
    ``net``)."""
    node = _first_argument(frame)
    if node is None:
        return "obj" + "".join(f"[{k!r}]" for k in keys) if keys else "the saved object"
    left = list(keys)
    while left:  # into the literal as far as it is written: {"nets": {"g": G}} -> G
        inner = _literal_item(node, left[0])
        if inner is None:
            break
        node = inner
        left.pop(0)
    text = ast.unparse(node)
    return (text if len(text) <= 40 else "obj") + "".join(f"[{k!r}]" for k in left)


def _literal_item(node: ast.expr, key: Any) -> ast.expr | None:
    if isinstance(node, ast.Dict):
        return next((v for k, v in zip(node.keys, node.values, strict=True)
                     if isinstance(k, ast.Constant) and k.value == key), None)  # fmt: skip
    if isinstance(node, (ast.List, ast.Tuple)) and isinstance(key, int) and key < len(node.elts):
        return node.elts[key]
    return None


def _built_at(frame: Any) -> list[dict[str, Any]]:
    """A checkpoint helper (``def save_checkpoint(state, path): torch.save(state, path)``)
    saves what its caller built: that line is related."""
    node = _first_argument(frame)
    caller = frame.f_back
    params = frame.f_code.co_varnames[: frame.f_code.co_argcount]
    if (isinstance(node, ast.Name) and node.id in params and caller is not None
            and is_user_file(caller.f_code.co_filename)):  # fmt: skip
        return [{"file": caller.f_code.co_filename, "line": caller.f_lineno,
                 "what": "the saved object is built here"}]  # fmt: skip
    return []


def _first_argument(frame: Any) -> ast.expr | None:
    """torch.save's first argument in the user's source (the call that spans the line
    that runs)."""
    tree = parse(frame.f_code.co_filename)
    line = frame.f_lineno
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, ast.Call) or not node.lineno <= line <= (node.end_lineno or line):
            continue
        if node.args and call_name(node) == "save":
            return node.args[0]
    return None
