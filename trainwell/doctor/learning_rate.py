"""Where the learning rate of a diverging run is set: the optimizer's construction and
the line its ``lr`` value comes from (a constant, an argparse option, a config entry)."""

from __future__ import annotations

import ast
from typing import Any

from torch import nn

from trainwell.doctor.assigned import argument, call_at, origin_lines
from trainwell.doctor.sites import Site, parse


def lr_related(
    optimizers: list[tuple[Any, Site | None]], models: list[nn.Module]
) -> tuple[list[dict[str, Any]], str]:
    """``related`` entries for the optimizer that trains ``models`` (the last built one
    when none is told) and the source text of its ``lr`` argument (``lr=1.0``)."""
    if not optimizers:
        return [], ""
    params = {id(p) for m in models for p in m.parameters()}
    owning = [(o, s) for o, s in optimizers
              if any(id(p) in params for g in o.param_groups for p in g["params"])]  # fmt: skip
    optimizer, site = (owning or optimizers)[-1]
    if site is None:
        return [], ""
    related = [{"file": site.file, "line": site.line,
                "what": "the optimizer: its learning rate is set here"}]  # fmt: skip
    tree = parse(site.file)
    call = call_at(tree, site.line, (type(optimizer).__name__,)) if tree is not None else None
    expr = argument(call, "lr", 1) if call is not None else None
    if expr is None or tree is None:
        return related, f"the default lr={optimizer.defaults.get('lr')}"
    for line in origin_lines(tree, expr, site.line):
        related.append({"file": site.file, "line": line, "what": "the learning rate's value"})
    return related, f"lr={ast.unparse(expr)}, {optimizer.param_groups[0]['lr']:g} in this run"
