"""Looking into a model's modules: the ones whose behaviour depends on train/eval mode,
modules held in plain containers, and the owner of a named part."""

from __future__ import annotations

import weakref
from typing import Any

from torch import nn

from trainwell.doctor.source import (
    user_class,
)

DROPOUT = nn.modules.dropout._DropoutNd


NORM = nn.modules.batchnorm._BatchNorm


_MODE_DEPENDENT = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)


MODULE_INTERNALS = frozenset(vars(nn.Module()))


def mode_modules(model: nn.Module, cache: weakref.WeakKeyDictionary) -> list[nn.Module]:
    """The dropout (p > 0) and batch-norm (with running statistics) modules of ``model``:
    the ones whose output depends on train/eval mode. Cached per model."""
    found = cache.get(model)
    if found is None:
        found = cache[model] = [
            m
            for m in model.modules()
            if (isinstance(m, DROPOUT) and m.p > 0)
            or (isinstance(m, NORM) and m.track_running_stats)
        ]
    return found


def held_modules(value: Any) -> list[Any]:
    items = value.values() if isinstance(value, dict) else value
    held = []
    for item in items:
        if isinstance(item, (nn.Module, nn.Parameter)):
            held.append(item)
        elif isinstance(item, (list, tuple)):
            held.extend(i for i in item if isinstance(i, (nn.Module, nn.Parameter)))
    return held


def params_of(obj: Any) -> list[nn.Parameter]:
    return [obj] if isinstance(obj, nn.Parameter) else list(obj.parameters())


def parent_of(model: nn.Module, name: str) -> tuple[nn.Module | None, str]:
    """The module that owns ``name`` as an attribute, and the attribute's name."""
    if not name:
        return None, ""
    path, _, attr = name.rpartition(".")
    parent = model.get_submodule(path) if path else model
    # Children of library modules (nn.Sequential's numbered items, MultiheadAttention's
    # out_proj) are reached through the library module's own name in the user's class.
    if path and (attr.isdigit() or user_class(type(parent)) is None):
        return parent_of(model, path)
    return parent, attr
