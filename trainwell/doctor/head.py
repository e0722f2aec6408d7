"""Where a classifier's number of outputs is set: the construction of its head layer
(``self.fc = nn.Linear(128, num_classes)``) and the line the size's value comes from
(``num_classes = 9``, a config entry, the model's argument), for a ``label-out-of-range``
whose fix is a head with more outputs."""

from __future__ import annotations

import ast
from typing import Any

from torch import nn

from trainwell.doctor.assigned import argument, origin_lines
from trainwell.doctor.sites import Site, is_user_file, parse
from trainwell.doctor.source import attribute_site, call_name, user_class

_HEADS = (nn.Linear, nn.LazyLinear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
# layer class -> (keyword, position) of its number of outputs
_OUT_ARG = {"Linear": ("out_features", 1), "LazyLinear": ("out_features", 0),
            "Conv1d": ("out_channels", 1), "Conv2d": ("out_channels", 1),
            "Conv3d": ("out_channels", 1)}  # fmt: skip


def _outputs(m: nn.Module) -> int | None:
    if isinstance(m, (nn.Linear, nn.LazyLinear)):
        return m.out_features
    if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        return m.out_channels
    return None


def head_site(
    models: list[nn.Module], classes: int, files: list[str]
) -> tuple[Site, list[dict[str, Any]]] | None:
    """The line that builds the head with ``classes`` outputs and ``related`` entries
    for where that number is set; looked for in the models' own classes, then in
    ``files`` (a model built in the script); ``None`` when not found."""
    for model in models:
        heads = [(p, m) for p, m in model.named_modules() if _outputs(m) == classes]
        if heads:
            found = _in_owner(model, heads[-1][0], classes)
            if found is not None:
                return _with_origin(*found)
    for file in dict.fromkeys(files):
        tree = parse(file) if is_user_file(file) else None
        calls = _layer_calls(tree, classes) if tree is not None else []
        if calls:
            return _with_origin(file, tree, calls[-1])
    return None


def _in_owner(model: nn.Module, path: str, classes: int) -> tuple[str, Any, ast.Call] | None:
    """The layer's call inside the statement of the nearest user class that holds it
    (``self.classifier = nn.Sequential(..., nn.Linear(64, 9))``)."""
    chain, module = [model], model
    parts = path.split(".")
    for part in parts[:-1]:
        module = getattr(module, part)
        chain.append(module)
    for owner, attr in reversed(list(zip(chain, parts))):
        if user_class(type(owner)) is None:
            continue
        site = attribute_site(type(owner), attr)
        tree = parse(site.file) if site is not None else None
        if site is None or tree is None:
            return None
        statements = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
                      and n.lineno == site.line]  # fmt: skip
        for strict in (True, False):
            calls = [c for s in statements for c in _layer_calls(s, classes, strict)]
            if calls:
                return site.file, tree, calls[-1]
        return None
    return None


def _layer_calls(node: ast.AST, classes: int, strict: bool = True) -> list[ast.Call]:
    """The layer constructions under ``node`` whose number of outputs is ``classes``
    written out, or a name that says classes; with ``strict`` off, any layer."""
    found: list[ast.Call] = []
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        name = call_name(call)
        if name is None or name not in _OUT_ARG:
            continue
        out = argument(call, *_OUT_ARG[name])
        if out is None:
            continue
        literal = isinstance(out, ast.Constant) and out.value == classes
        text = ast.unparse(out).lower()
        named = any(w in text for w in ("class", "label", "categor", "n_out", "num_out"))
        if literal or named or not strict:
            found.append(call)
    return sorted(found, key=lambda c: c.lineno)


def _with_origin(file: str, tree: Any, call: ast.Call) -> tuple[Site, list[dict[str, Any]]]:
    out = argument(call, *_OUT_ARG[call_name(call) or "Linear"])
    lines = origin_lines(tree, out, call.lineno) if out is not None else []
    related = [{"file": file, "line": line, "what": "the number of classes is set here"}
               for line in lines]  # fmt: skip
    return Site(file, call.lineno), related


def head_for_label(
    models: list[nn.Module], label: int, files: list[str]
) -> tuple[Site, list[dict[str, Any]]] | None:
    """``head_site`` for a crash that names only the bad label (PyTorch's "Target 9 is
    out of bounds"): the head is the models' last layer, too small when the label is a
    few past its outputs."""
    for model in models:
        sizes = [n for n in (_outputs(m) for m in model.modules()) if n]
        if sizes and sizes[-1] <= label < 2 * sizes[-1] + 2:
            return head_site([model], sizes[-1], files)
    return None
