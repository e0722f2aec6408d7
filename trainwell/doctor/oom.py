"""An out-of-memory error explained: the largest live tensors, and the user's variables,
lists, dicts and attributes that hold them.

At the error, every tensor the garbage collector knows is measured (each storage once)
and matched to its holder in the user's frames, from the failing line out: a variable
(``x``), an item of a list, tuple, deque or dict (``cache[3]``, ``outputs['logits']``,
one level inside a dict of lists too: ``history['val'][7]``) or an attribute of one of
the user's objects (``self.buffer``). Holders are then ranked by the bytes they hold, so
a list that kept every step's output is named even when each tensor in it is small.
"""

from __future__ import annotations

import gc
import types
from collections import deque
from typing import Any

import torch

from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import is_user_file

_MB = 2**20
_CONTAINERS = (list, tuple, deque)
_ITEMS = 10_000  # items looked at per container, at most


def explain_oom(frame: types.FrameType, text: str) -> Finding:
    """The ``oom`` finding for an out-of-memory error raised at ``frame``."""
    holders = _holders_in_scope(frame)
    tensors = _live_tensors()
    largest = [
        {
            "bytes": size,
            "shape": list(t.shape),
            "device": str(t.device),
            "held_by": holders.get(id(t), (_UNNAMED, ""))[0],
            "has_graph": t.grad_fn is not None,
        }
        for size, t in tensors[:5]
    ]
    ranked = _rank_holders(tensors, holders)
    params = sum(p.numel() * p.element_size() for p in _parameters(frame))
    named = "; ".join(
        f"`{h['holder']}` ({h['kind']}: {h['tensors']} tensor(s), {h['bytes'] / _MB:.1f} MB)"
        for h in ranked[:3]
    )
    message = "out of memory here: " + " ".join(text.split())[:200]
    if named:
        message += f"; the largest live tensors are held by {named}"
    return Finding(
        code="oom",
        severity="error",
        file=frame.f_code.co_filename,
        line=frame.f_lineno,
        message=message,
        why="the step needed more memory than the device has; the largest live tensors and "
        "their holders are in the evidence",
        fix="lower the batch size (keep the global batch with gradient accumulation), use "
        "mixed precision (bf16/fp16), activation checkpointing, run evaluation under "
        "torch.no_grad(), and do not keep tensors with graphs across steps",
        evidence={"largest_tensors": largest, "holders": ranked[:10], "parameter_bytes": params},
    )


_UNNAMED = "unnamed (the autograd graph, or an object the doctor does not look into)"


def _live_tensors() -> list[tuple[int, torch.Tensor]]:
    """Tensors that are not parameters, largest storage first."""
    tensors = []
    for obj in gc.get_objects():
        # type(), not isinstance: isinstance asks an object's __class__, and some
        # (torch.distributed.reduce_op) warn when asked.
        cls = type(obj)
        if issubclass(cls, torch.Tensor) and not issubclass(cls, torch.nn.Parameter):
            try:
                size = obj.untyped_storage().nbytes()
            except (RuntimeError, NotImplementedError):
                continue
            tensors.append((size, obj))
    tensors.sort(key=lambda t: -t[0])
    return tensors


def _rank_holders(
    tensors: list[tuple[int, torch.Tensor]], holders: dict[int, tuple[str, str]]
) -> list[dict[str, Any]]:
    """Holders by the bytes of the tensors they hold (a storage counted once each)."""
    totals: dict[str, dict[str, Any]] = {}
    counted: set[tuple[str, int]] = set()
    for size, t in tensors:
        named = holders.get(id(t))
        if named is None:
            continue
        root, kind = _root(named)
        key = (root, t.untyped_storage().data_ptr())
        entry = totals.setdefault(root, {"holder": root, "kind": kind, "tensors": 0,
                                         "bytes": 0})  # fmt: skip
        entry["tensors"] += 1
        if key not in counted:
            counted.add(key)
            entry["bytes"] += size
    return sorted(totals.values(), key=lambda h: -h["bytes"])


def _root(named: tuple[str, str]) -> tuple[str, str]:
    """The holder a name belongs to: ``cache`` for ``cache[3]``, ``self.buf`` for
    ``self.buf[0]``, with its kind."""
    name, kind = named
    return (name.split("[", 1)[0], kind or "a tensor")


def _holders_in_scope(frame: types.FrameType) -> dict[int, tuple[str, str]]:
    """id(tensor) -> (the name it is held by, the kind of its holder)."""
    names: dict[int, tuple[str, str]] = {}
    seen: set[int] = set()
    f: types.FrameType | None = frame
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            for scope in (f.f_locals, f.f_globals):
                for name, value in list(scope.items()):
                    if not name.startswith("__"):
                        _name_value(names, seen, name, value, 0)
        f = f.f_back
    return names


def _name_value(
    names: dict[int, tuple[str, str]], seen: set[int], name: str, value: Any, depth: int,
    kind: str = "",
) -> None:  # fmt: skip
    """Name the tensors in ``value``; ``kind`` is what the outermost holder is (its
    tensors are counted for it: a dict of lists is one dict)."""
    if isinstance(value, torch.Tensor):
        names.setdefault(id(value), (name, kind))
        return
    if id(value) in seen or depth > 2:
        return
    if isinstance(value, _CONTAINERS):
        seen.add(id(value))
        kind = kind or f"a {type(value).__name__}"
        for i, item in enumerate(list(value)[:_ITEMS]):
            _name_value(names, seen, f"{name}[{i}]", item, depth + 1, kind)
    elif isinstance(value, dict):
        seen.add(id(value))
        kind = kind or "a dict"
        for key, item in list(value.items())[:_ITEMS]:
            _name_value(names, seen, f"{name}[{key!r}]", item, depth + 1, kind)
    elif _is_user_object(value):
        seen.add(id(value))
        for attr, item in list(vars(value).items()):
            _name_value(names, seen, f"{name}.{attr}", item, depth + 1)


def _is_user_object(value: Any) -> bool:
    module = getattr(type(value), "__module__", "") or ""
    if isinstance(value, torch.nn.Module) or not hasattr(value, "__dict__"):
        return False
    if isinstance(value, (types.ModuleType, type, types.FunctionType, types.MethodType)):
        return False
    return module == "__main__" or module == "__mp_main__" or _defined_by_user(value)


def _defined_by_user(value: Any) -> bool:
    import sys

    module = sys.modules.get(type(value).__module__)
    file = getattr(module, "__file__", None)
    return bool(file) and is_user_file(file)


def _parameters(frame: types.FrameType) -> list[torch.nn.Parameter]:
    seen: dict[int, torch.nn.Parameter] = {}
    for scope in (frame.f_locals, frame.f_globals):
        for value in scope.values():
            if isinstance(value, torch.nn.Module):
                for p in value.parameters():
                    seen[id(p)] = p
    return list(seen.values())
