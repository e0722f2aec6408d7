"""Walking autograd graphs, and the tensors of a forward's output."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def walk(root: Any, limit: int) -> Iterator[Any]:
    """The nodes of the autograd graph under ``root``, each once, at most ``limit``."""
    seen = {root}
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None and nxt not in seen and len(seen) < limit:
                seen.add(nxt)
                stack.append(nxt)


def leaves(root: Any, limit: int) -> Iterator[torch.Tensor]:
    """The tensors whose ``.grad`` a backward from ``root`` fills (the variables of its
    AccumulateGrad nodes), in walk order (the last layer's first), within ``limit``
    nodes."""
    for node in walk(root, limit):
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            yield variable


def output_tensors(output: Any) -> list[torch.Tensor]:
    """The tensors of a forward's output: a tensor, or those in a tuple, list or dict."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        return [v for v in output if isinstance(v, torch.Tensor)]
    return []
