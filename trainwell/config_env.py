"""``${oc.env:VAR}`` in a config: the run uses the value, what is written keeps the form.

OmegaConf resolves ``${oc.env:VAR}`` (and ``${oc.env:VAR,default}``) from the
environment, which is how a config takes a token, a host or a scratch folder without
holding it. Values read that way may be secrets, so everything trainwell writes from the
config (``config.yaml`` in the run folder, the checkpoints' copy, the report, MLflow's
params) holds the unresolved ``${oc.env:VAR}`` form instead, for each key whose value
comes from the environment (directly, or through an interpolation of such a key).
``run.name`` refuses it: the name becomes the run folder's name, which every file shows.

Example:
    >>> from omegaconf import OmegaConf
    >>> cfg = OmegaConf.create({"model": {"kwargs": {"token": "${oc.env:HOME}", "n": 3}}})
    >>> env_forms(cfg)
    {('model', 'kwargs', 'token'): '${oc.env:HOME}'}
"""

from __future__ import annotations

import re
from typing import Any

from omegaconf import OmegaConf

from trainwell.errors import UserError

_ENV = re.compile(r"\$\{\s*oc\.env\s*:")
_REFERENCE = re.compile(r"\$\{\s*([A-Za-z_][\w.]*)\s*\}")


def env_forms(merged: Any) -> dict[tuple[str, ...], str]:
    """``{key path: unresolved text}`` of every value that comes from the environment."""
    raw = OmegaConf.to_container(merged, resolve=False)
    leaves = {path: text for path, text in _string_leaves(raw) if "${" in text}
    tainted = {path: text for path, text in leaves.items() if _ENV.search(text)}
    grew = True
    while grew:  # ${model.kwargs.token} where that key is itself an env value
        grew = False
        dotted = {".".join(p) for p in tainted}
        for path, text in leaves.items():
            if path not in tainted and any(r in dotted for r in _REFERENCE.findall(text)):
                tainted[path] = text
                grew = True
    if ("run", "name") in tainted:
        raise UserError(
            "run.name: ${oc.env:...} is not taken there: the name becomes the run folder's "
            "name, which every file of the run shows; give it on the command line "
            "(run.name=$VAR) if it is no secret"
        )
    return tainted


def written(plain: dict[str, Any], forms: dict[tuple[str, ...], str]) -> dict[str, Any]:
    """``plain`` (the config as containers) with each env value put back as its form."""
    for path, text in forms.items():
        node: Any = plain
        for part in path[:-1]:
            node = _child(node, part)
        last = path[-1]
        if isinstance(node, dict) and last in node:
            node[last] = text
        elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
            node[int(last)] = text
    return plain


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return None


def _string_leaves(value: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    found: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[tuple[str, ...], Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            stack.extend(((*where, str(k)), v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend(((*where, str(i)), v) for i, v in enumerate(item))
        elif isinstance(item, str):
            found.append((where, item))
    return found
