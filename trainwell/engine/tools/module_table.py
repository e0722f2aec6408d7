"""The per-module table of ``--dry-run``: each block's type, output shape and parameters.

Forward hooks on the model's top-level blocks record the output of the dry step's real
batch. The table stays short: containers that are never called themselves
(``ModuleList``, ``ModuleDict``) show their children instead, a model that wraps a single
block shows that block's children, and runs of identical blocks (``layers.0`` ...
``layers.11``) fold into one row.

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> net[0].requires_grad_(False)  # doctest: +ELLIPSIS
    Linear(...)
    >>> with ModuleOutputs(net) as table:
    ...     _ = net(torch.zeros(3, 4))
    >>> for line in table.lines():
    ...     print(line)
    module  type    output          params  state
    0       Linear  (3, 8) float32      40  frozen
    1       ReLU    (3, 8) float32       0  -
    2       Linear  (3, 2) float32      18  trainable
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from trainwell.engine.loading.batch import describe

# Rows beyond this are cut (with a line saying how many); deeper blocks are not shown.
MAX_ROWS = 30
MAX_DEPTH = 3


@dataclass
class Row:
    """One block (or a run of identical ones)."""

    name: str
    kind: str
    output: str
    params: int
    trainable: str
    calls: int = 0
    repeat: int = 1


class ModuleOutputs:
    """A context manager that hooks the blocks of ``model`` and records their outputs."""

    def __init__(self, model: nn.Module) -> None:
        self.blocks = _blocks(model)
        self.outputs: dict[str, str] = {}
        self.calls: dict[str, int] = {}
        self.handles: list[Any] = []

    def __enter__(self) -> ModuleOutputs:
        for name, module in self.blocks:
            self.handles.append(module.register_forward_hook(self._hook(name)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def _hook(self, name: str) -> Callable[[nn.Module, Any, Any], None]:
        def record(module: nn.Module, args: Any, output: Any) -> None:
            self.calls[name] = self.calls.get(name, 0) + 1
            self.outputs.setdefault(name, describe(output))

        return record

    def rows(self) -> list[Row]:
        """The blocks in model order, identical neighbours folded."""
        rows = [
            Row(name, type(m).__name__, self.outputs.get(name, "not called"),
                *_params(m), calls=self.calls.get(name, 0))
            for name, m in self.blocks
        ]  # fmt: skip
        return _fold(rows)

    def lines(self) -> list[str]:
        """The table as aligned text lines, a header first."""
        rows = self.rows()
        shown = rows[:MAX_ROWS]
        cells = [("module", "type", "output", "params", "state")]
        for r in shown:
            name = r.name if r.repeat == 1 else f"{r.name} (x{r.repeat})"
            output = r.output + (f" ({r.calls} calls)" if r.calls > 1 and r.repeat == 1 else "")
            cells.append((name, r.kind, output, f"{r.params:,}", r.trainable))
        widths = [max(len(c[i]) for c in cells) for i in range(5)]
        out = []
        for c in cells:
            left = "  ".join(c[i].ljust(widths[i]) for i in range(3))
            out.append(f"{left}  {c[3].rjust(widths[3])}  {c[4]}".rstrip())
        if len(rows) > MAX_ROWS:
            out.append(f"... {len(rows) - MAX_ROWS} more rows")
        return out


def _blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The rows' modules: the top-level children, opened where they are only containers."""
    prefix, root = "", model
    # A wrapper of one block (DDP-less `self.net = Sequential(...)`): its children speak.
    for _ in range(MAX_DEPTH):
        children = list(root.named_children())
        if len(children) != 1 or not list(children[0][1].children()):
            break
        prefix, root = f"{prefix}{children[0][0]}.", children[0][1]
    out = []
    for name, child in root.named_children():
        out += _opened(f"{prefix}{name}", child, 1)
    return out or [(type(model).__name__, model)]


def _opened(name: str, module: nn.Module, depth: int) -> list[tuple[str, nn.Module]]:
    if isinstance(module, (nn.ModuleList, nn.ModuleDict)) and depth < MAX_DEPTH:
        out = []
        for child_name, child in module.named_children():
            out += _opened(f"{name}.{child_name}", child, depth + 1)
        return out
    return [(name, module)]


def _params(module: nn.Module) -> tuple[int, str]:
    params = list(module.parameters())
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    if not params:
        return 0, "-"
    if trainable == total:
        return total, "trainable"
    if trainable == 0:
        return total, "frozen"
    return total, f"partly frozen ({trainable:,} trainable)"


def _fold(rows: list[Row]) -> list[Row]:
    """Runs of rows that differ only in a trailing index (``layers.0``, ``layers.1``)."""
    out: list[Row] = []
    for row in rows:
        last = out[-1] if out else None
        if last is not None and _same_run(last, row):
            last.repeat += 1
            last.name = f"{_stem(last.name)}.{_index(last.name)}-{_index(row.name)}"
            continue
        out.append(Row(**vars(row)))
    return out


def _same_run(a: Row, b: Row) -> bool:
    stem_a, stem_b = _stem(a.name), _stem(b.name)
    if stem_a is None or stem_a != stem_b:
        return False
    return (a.kind, a.output, a.params, a.trainable) == (b.kind, b.output, b.params, b.trainable)


def _stem(name: str) -> str | None:
    head, _, tail = name.rpartition(".")
    tail = tail.split("-")[0]
    return head if head and tail.isdigit() else None


def _index(name: str) -> str:
    # The first index of a folded "layers.0-3" too.
    return name.rpartition(".")[2].split("-")[0]
