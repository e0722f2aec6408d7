"""``optim.groups``: parameter groups over parameter names, each with its own lr and decay.

A group is ``{params: GLOB (or a list of globs), name: ..., lr: X | lr_scale: X,
weight_decay: X, ...}``; the other keys are keyword arguments of the optimizer, set for
that group (``betas``, ``momentum``, ...). Globs are :func:`fnmatch.fnmatchcase` patterns
over the names of ``model.named_parameters()`` (``backbone.*``, ``*.bias``,
``head.0.weight``); each parameter goes to the first group that matches it, the rest keep
``optim.lr`` and ``optim.weight_decay``. Inside each group the engine's rule still holds:
biases and norm weights (fewer than two dimensions) get no weight decay, so one config
group becomes up to two optimizer groups (both carry the group's ``name``).

Frozen parameters (``requires_grad=False``) are put in their group too: torch's
optimizers skip a parameter whose ``.grad`` is ``None`` (no update, no weight decay), and
once it is unfrozen (by a callback, or by the model itself) it trains with its group's
lr, with nothing to rebuild.

The optimizer's groups are in this order: the parameters no group matched (``optim.lr``:
``train/lr`` stays what it was without groups), then the config's groups in order. Each
named group's lr is logged as ``train/lr/<name>``.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
import re
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from trainwell._options import check, check_number
from trainwell.errors import UserError

# The keys of a group the engine reads itself; any other key is the optimizer's.
OWN_KEYS = ("params", "name", "lr", "lr_scale", "weight_decay")
# Optimizer arguments a group must not set: the parameters are the group's own.
_NOT_PER_GROUP = ("params", "self")


def check_groups(groups: Any, optimizer_class: type | None) -> None:
    """Validate ``optim.groups`` (types, ranges, unknown keys): one line for the first
    problem. Keys other than the engine's are checked against ``optimizer_class``'s
    arguments (``None``: an import path, checked when the optimizer is built).

    Example:
        >>> check_groups([{"params": "head.*", "lr_scale": 10}], torch.optim.AdamW)
        >>> check_groups([{"params": "head.*", "lr_sacle": 10}], torch.optim.AdamW)
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: optim.groups[0]: unknown key 'lr_sacle'; did you mean lr_scale?
    """
    check(isinstance(groups, list), "optim.groups", f"must be a list; got {groups!r}")
    names: set[str] = set()
    for i, group in enumerate(groups):
        key = f"optim.groups[{i}]"
        example = "{params: 'backbone.*', lr_scale: 0.1}"
        check(isinstance(group, dict), key, f"must be a mapping like {example}; got {group!r}")
        _check_group(group, key)
        if optimizer_class is not None:
            check_extra_keys(group, key, optimizer_class)
        name = group_name(group, i)
        check(name not in names, f"{key}.name",
              f"{name!r} names another group too; give each group its own name")  # fmt: skip
        names.add(name)


def _check_group(group: dict[str, Any], key: str) -> None:
    check("params" in group, key, "has no 'params' (a glob over parameter names: 'backbone.*')")
    globs = globs_of(group)
    check(
        bool(globs) and all(isinstance(g, str) and g for g in globs),
        f"{key}.params",
        f"must be a glob or a list of globs over parameter names; got {group['params']!r}",
    )
    check(not ("lr" in group and "lr_scale" in group), key,
          "sets both lr and lr_scale; give one (lr_scale multiplies optim.lr)")  # fmt: skip
    if "lr" in group:
        check_number(group["lr"], f"{key}.lr", 0, 10)
    if "lr_scale" in group:
        check_number(group["lr_scale"], f"{key}.lr_scale", 0, 1e4)
    if "weight_decay" in group:
        check_number(group["weight_decay"], f"{key}.weight_decay", 0, 10, high_open=True)
    if "name" in group:
        name = group["name"]
        check(isinstance(name, str) and re.fullmatch(r"[\w.\-]+", name or "") is not None,
              f"{key}.name", f"must be a word (letters, digits, _ . -); got {name!r}")  # fmt: skip


def check_extra_keys(group: dict[str, Any], key: str, optimizer: Any) -> None:
    """Refuse a key that is neither the engine's nor an argument of ``optimizer``."""
    accepted = optimizer_arguments(optimizer)
    if accepted is None:
        return  # takes **kwargs: whatever it accepts is its business
    for extra in group:
        if extra in OWN_KEYS or extra in accepted:
            continue
        close = difflib.get_close_matches(str(extra), [*OWN_KEYS, *sorted(accepted)], n=1)
        if close:
            raise UserError(f"{key}: unknown key {extra!r}; did you mean {close[0]}?")
        raise UserError(
            f"{key}: unknown key {extra!r}; a group takes {', '.join(OWN_KEYS)} and "
            f"{getattr(optimizer, '__name__', 'the optimizer')}'s arguments "
            f"({', '.join(sorted(accepted))})"
        )


def optimizer_arguments(optimizer: Any) -> set[str] | None:
    """The keyword arguments of an optimizer class or factory; ``None`` when it takes
    ``**kwargs`` (or its signature cannot be read)."""
    try:
        params = inspect.signature(optimizer).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return {n for n in params if n not in _NOT_PER_GROUP} - {"lr", "weight_decay"}


def globs_of(group: dict[str, Any]) -> list[Any]:
    """A group's globs, as a list."""
    globs = group.get("params")
    return list(globs) if isinstance(globs, (list, tuple)) else [globs]


def group_name(group: dict[str, Any], index: int) -> str:
    """The group's ``name``, else one made from its first glob (``backbone.*`` ->
    ``backbone``; ``*.bias`` -> ``bias``), else ``group<index>``.

    Example:
        >>> group_name({"params": "encoder.layers.*"}, 0), group_name({"params": "*"}, 2)
        ('encoder.layers', 'group2')
    """
    if isinstance(group.get("name"), str):
        return group["name"]
    first = str(globs_of(group)[0])
    made = re.sub(r"[^\w.\-]+", "_", re.sub(r"[*?\[\]]", "", first)).strip("._-")
    return made or f"group{index}"


def build_groups(
    model: nn.Module, groups: list[dict[str, Any]], lr: float, weight_decay: float
) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: the unmatched parameters first (decayed, then not
    decayed), then each config group's, split the same way. Frozen parameters included.

    Raises :class:`UserError` for a group whose globs match no parameter.

    Example:
        >>> net = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
        >>> out = build_groups(net, [{"params": "1.*", "lr_scale": 10}], 0.01, 0.1)
        >>> [(g.get("name"), len(g["params"]), g.get("lr"), g["weight_decay"]) for g in out]
        [(None, 1, None, 0.1), (None, 1, None, 0.0), ('1', 1, 0.1, 0.1), ('1', 1, 0.1, 0.0)]
    """
    named = list(model.named_parameters())
    members: list[list[torch.Tensor]] = [[] for _ in groups]
    rest: list[torch.Tensor] = []
    for name, param in named:
        index = _first_match(name, groups)
        (rest if index is None else members[index]).append(param)
    for i, (group, params) in enumerate(zip(groups, members)):
        if not params:
            raise UserError(_matches_nothing(i, group, model, [n for n, _ in named]))
    out = split_decay(rest, weight_decay, {}, keep_empty=not groups)
    for i, (group, params) in enumerate(zip(groups, members)):
        extra = {k: v for k, v in group.items() if k not in OWN_KEYS}
        extra["lr"] = group["lr"] if "lr" in group else lr * group.get("lr_scale", 1.0)
        extra["name"] = group_name(group, i)
        out += split_decay(params, group.get("weight_decay", weight_decay), extra)
    return out


def _first_match(name: str, groups: list[dict[str, Any]]) -> int | None:
    for i, group in enumerate(groups):
        if any(fnmatch.fnmatchcase(name, glob) for glob in globs_of(group)):
            return i
    return None


def _matches_nothing(i: int, group: dict[str, Any], model: nn.Module, names: list[str]) -> str:
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    return (
        f"optim.groups[{i}].params: {group['params']!r} matches no parameter of "
        f"{type(model).__name__} (its parameters are named {shown or 'nothing: it has none'})"
    )


def split_decay(
    params: Iterable[torch.Tensor], weight_decay: float, extra: dict[str, Any],
    keep_empty: bool = False,
) -> list[dict[str, Any]]:  # fmt: skip
    """Decayed (2+ dims) and not decayed (biases, norm weights) groups of ``params``;
    empty ones left out (the decayed one kept with ``keep_empty``, as it always was)."""
    decay: list[torch.Tensor] = []
    no_decay: list[torch.Tensor] = []
    for p in params:
        (decay if p.ndim >= 2 else no_decay).append(p)
    out = []
    if decay or keep_empty:
        out.append({"params": decay, "weight_decay": weight_decay, **extra})
    if no_decay:
        out.append({"params": no_decay, **extra, "weight_decay": 0.0})
    return out


def group_lrs(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """``train/lr/<name>`` for each named group (the first of each name): read at log
    points only.

    Example:
        >>> opt = torch.optim.SGD([{"params": [nn.Parameter(torch.ones(1))], "name": "head"}],
        ...                       lr=0.5)
        >>> group_lrs(opt)
        {'train/lr/head': 0.5}
    """
    out: dict[str, float] = {}
    for group in optimizer.param_groups:
        name = group.get("name")
        if isinstance(name, str) and f"train/lr/{name}" not in out:
            out[f"train/lr/{name}"] = float(group["lr"])
    return out
