"""Large keyword-argument blocks of a config bypass OmegaConf, which costs ~10 s per MB.

A ``*kwargs`` mapping (``model.kwargs``, ``data.kwargs``, ...) is handed to the user's
code as it is: OmegaConf neither types nor checks what is inside. So a big one (a
vocabulary, a class table) is taken out of the file's layer before the merge, and merged
back afterwards (mappings key by key, anything else replaced: OmegaConf's own rule), the
section's checks then run again. A block that holds an interpolation (``${...}``) stays
with OmegaConf, which resolves it.

Example:
    >>> data = {"model": {"kwargs": {f"k{i}": i for i in range(5000)}}}
    >>> bulk = take_bulk(data)
    >>> data, sorted(bulk)
    ({'model': {'kwargs': {}}}, [('model', 'kwargs')])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Below this many values OmegaConf's cost does not matter and its rules apply unchanged
# (an interpolation elsewhere may point into the block).
BULK_VALUES = 2_000


def take_bulk(data: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """Take the large, interpolation-free ``*kwargs`` mappings out of ``data`` (in place)."""
    taken: dict[tuple[str, str], Any] = {}
    for section, fields in data.items():
        if not isinstance(fields, dict):
            continue
        for name, value in fields.items():
            if name.endswith("kwargs") and isinstance(value, dict) and _is_bulk(value):
                taken[(section, name)] = value
                fields[name] = {}
    return taken


def put_back(cfg: Any, taken: dict[tuple[str, str], Any]) -> None:
    """Merge the taken blocks under what the overrides set, and check each section again."""
    for (section, name), value in taken.items():
        part = getattr(cfg, section)
        setattr(part, name, _merge(value, getattr(part, name)))
        check = getattr(part, "__post_init__", None)
        if check is not None:
            check()


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, Mapping) and isinstance(over, Mapping):
        merged = dict(base)
        for key, value in over.items():
            merged[key] = _merge(base[key], value) if key in base else value
        return merged
    return over


def _is_bulk(value: Any) -> bool:
    count = 0
    stack = [value]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and "${" in item:
            return False
    return count > BULK_VALUES
