"""Speed and memory levers on the model: ``torch.compile`` (``train.compile``) and
activation checkpointing (``model.activation_checkpointing``).

Both leave the module's parameters and ``state_dict`` keys as they are, so checkpoints,
resume, export and the doctor see the same model with or without them.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainwell.errors import UserError


def compile_model(net: nn.Module, mode: str) -> nn.Module:
    """``torch.compile(net, mode=mode)``: compiled lazily, at the first forward.

    Example:
        >>> compiled = compile_model(nn.Linear(2, 2), "default")
        >>> type(compiled).__name__
        'OptimizedModule'
    """
    compiled = torch.compile(net, mode=None if mode == "default" else mode)
    # A module compiles to an OptimizedModule (an nn.Module wrapping it); torch's stub
    # types every case as the callable it was given.
    return cast(nn.Module, compiled)


def is_compile_error(exc: BaseException) -> bool:
    """Whether ``exc`` came from torch.compile's machinery (Dynamo, Inductor, a backend),
    not from the model's own code run eagerly.

    Example:
        >>> is_compile_error(ValueError("bad shape"))
        False
    """
    return any(
        type(e).__module__.startswith(("torch._dynamo", "torch._inductor"))
        for e in (exc, exc.__cause__)
        if e is not None
    )


def compile_failure_line(exc: BaseException) -> str:
    """One line: torch.compile failed, why, and that training goes on eager.

    A backend's failure is wrapped (``BackendCompilerFailed``) with the reason inside:
    the reason is what the line shows.

    Example:
        >>> compile_failure_line(RuntimeError("no C++ compiler"))[:72]
        'train.compile: the model did not compile (RuntimeError: no C++ compiler)'
    """
    inner = getattr(exc, "inner_exception", None) or exc.__cause__ or exc
    text = next((line for line in str(inner).splitlines() if line.strip()), "")
    why = f"{type(inner).__name__}: {text.strip()[:160]}" if text else type(inner).__name__
    return f"train.compile: the model did not compile ({why}); training eager instead"


def repeated_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The children of the model's largest ``ModuleList``/``Sequential`` (most children;
    the root counts), named as ``model.get_submodule`` names them; those with parameters.

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 2))
        >>> [name for name, _ in repeated_blocks(net)]
        ['0', '2']
    """
    best: tuple[int, str, nn.Module] | None = None
    for name, module in model.named_modules():
        is_list = isinstance(module, (nn.ModuleList, nn.Sequential))
        if is_list and len(module) > 1 and (best is None or len(module) > best[0]):
            best = (len(module), name, module)
    if best is None:
        return []
    _, prefix, container = best
    return [
        (f"{prefix}.{child}" if prefix else child, block)
        for child, block in container.named_children()
        if any(True for _ in block.parameters())
    ]


def checkpoint_activations(model: nn.Module, names: bool | list[str]) -> list[str]:
    """Recompute the activations of the chosen blocks in backward instead of keeping them:
    ``True`` picks the :func:`repeated_blocks`, a list names the modules. Returns the
    names of the blocks wrapped.

    Each block's ``forward`` goes through ``torch.utils.checkpoint`` (non-reentrant, the
    RNG state kept, so dropout masks are the same in the recomputation). Only the
    instance's ``forward`` changes: hooks, parameters and state_dict keys stay.

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 2))
        >>> checkpoint_activations(net, True)
        ['0', '2']
        >>> net(torch.ones(3, 2, requires_grad=True)).sum().backward()
    """
    if names is True:
        chosen = repeated_blocks(model)
        if not chosen:
            raise UserError(
                "model.activation_checkpointing: the model has no ModuleList or Sequential "
                "of blocks to checkpoint; name the modules: "
                "model.activation_checkpointing=[encoder,decoder]"
            )
    else:
        chosen = [
            (name, submodule(model, name, "model.activation_checkpointing")) for name in names or []
        ]
    for _, block in chosen:
        block.forward = functools.partial(_checkpointed, block.forward)
    return [name for name, _ in chosen]


def _checkpointed(forward: Any, *args: Any, **kwargs: Any) -> Any:
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)  # evaluation: nothing is kept for a backward
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def submodule(model: nn.Module, name: str, key: str) -> nn.Module:
    """``model.get_submodule(name)``, or one line naming ``key`` and the modules there are.

    Example:
        >>> submodule(nn.Sequential(nn.Linear(2, 2)), "0", "dist.fsdp_modules")
        Linear(in_features=2, out_features=2, bias=True)
    """
    try:
        return model.get_submodule(name)
    except AttributeError:
        known = [n for n, _ in model.named_children()]
        raise UserError(
            f"{key}: the model has no module {name!r}; its "
            f"top-level modules: {', '.join(known) or '(none)'}"
        ) from None
