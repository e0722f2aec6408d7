"""The state of the metric objects a step updates, put back after the dry step.

The dry step (:mod:`trainwell.engine.build.preflight`) runs the user's train and eval steps on
two samples before training. A step that updates a stateful metric of its own (a
``torchmetrics`` object in the step's module, a counter on the model) would count those
two samples in the first evaluation (402 of a 400-sample split). Every metric-like
object the steps can reach (one with ``update``, ``compute`` and ``reset``: in the
model, in a step's globals, closure, ``functools.partial`` arguments or attributes, one
container deep) has its state saved before and put back after. The ``train.metrics``
objects are not built yet then: the dry step never sees them.

Example:
    >>> class Count:
    ...     def __init__(self): self.n = 0
    ...     def update(self, p, t): self.n += len(t)
    ...     def compute(self): return self.n
    ...     def reset(self): self.n = 0
    >>> seen = Count()
    >>> def step(model, batch):
    ...     seen.update(None, batch)
    >>> with kept_metric_state(None, step):
    ...     step(None, [1, 2])
    >>> seen.n
    0
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import itertools
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

_METHODS = ("update", "compute", "reset")
# torchmetrics' bookkeeping beside the states its _defaults name.
_METRIC_EXTRAS = ("_update_count", "_computed")


def is_metric_like(obj: Any) -> bool:
    """Has ``update``, ``compute`` and ``reset`` (an instance, not a class)."""
    if isinstance(obj, type):
        return False
    try:
        return all(callable(getattr(obj, m, None)) for m in _METHODS)
    except Exception:  # a proxy whose attributes raise is no metric of the user's
        return False


@contextlib.contextmanager
def kept_metric_state(model: nn.Module | None, *steps: Any) -> Iterator[None]:
    """Whatever runs inside, the reachable metric objects end with the state they had."""
    found: dict[int, Any] = {}
    if model is not None:
        for module in model.modules():
            if is_metric_like(module):
                found[id(module)] = module
    for step in steps:
        for obj in _referenced(step):
            _collect(obj, found, depth=2)
    saved = [_snapshot(obj) for obj in found.values()]
    try:
        yield
    finally:
        for restore in saved:
            restore()


def _referenced(fn: Any) -> Iterator[Any]:
    """What a step function can reach: partial arguments, a bound method's object, a
    callable object's attributes, a function's closure and the globals it names."""
    while isinstance(fn, functools.partial):
        yield from fn.args
        yield from fn.keywords.values()
        fn = fn.func
    if inspect.ismethod(fn):
        yield fn.__self__
        fn = fn.__func__
    elif not inspect.isfunction(fn) and callable(fn):
        yield fn
        fn = type(fn).__call__
    if not inspect.isfunction(fn):
        return
    for cell in fn.__closure__ or ():
        with contextlib.suppress(ValueError):  # an empty cell
            yield cell.cell_contents
    code_names = set(fn.__code__.co_names)
    for const in fn.__code__.co_consts:  # names used by nested functions and lambdas
        if inspect.iscode(const):
            code_names.update(const.co_names)
    for name in code_names:
        if name in fn.__globals__:
            yield fn.__globals__[name]


def _collect(obj: Any, found: dict[int, Any], depth: int) -> None:
    if id(obj) in found or inspect.ismodule(obj) or inspect.isroutine(obj):
        return
    if is_metric_like(obj):
        found[id(obj)] = obj
        if isinstance(obj, nn.Module):  # a torchmetrics collection holds its metrics
            for sub in obj.modules():
                if sub is not obj and is_metric_like(sub):
                    found[id(sub)] = sub
        return
    if depth <= 0 or isinstance(obj, (str, bytes, type, torch.Tensor)):
        return
    for child in _children(obj):
        _collect(child, found, depth - 1)


def _children(obj: Any) -> list[Any]:
    """What a container or an object holds (at most 100: a data set is no metric's home)."""
    if isinstance(obj, Mapping):
        return list(itertools.islice(obj.values(), 100))
    if isinstance(obj, (list, tuple, set)):
        return list(itertools.islice(obj, 100))
    if isinstance(obj, nn.Module):
        return list(obj.children())
    return list(getattr(obj, "__dict__", {}).values())[:100]


def _snapshot(obj: Any) -> Any:
    """A function that puts ``obj``'s state back as it is now."""
    defaults = getattr(obj, "_defaults", None)
    if isinstance(obj, nn.Module) and isinstance(defaults, Mapping):
        names = [*defaults, *(n for n in _METRIC_EXTRAS if hasattr(obj, n))]
    else:
        # A plain object: its state is its data attributes (numbers, tensors and
        # containers of them); references to other objects are not its to restore.
        held = vars(obj) if hasattr(obj, "__dict__") else {}
        names = [n for n, v in held.items() if _is_state(v)]
    before = set(vars(obj)) if hasattr(obj, "__dict__") else set()
    state = {}
    for name in names:
        with contextlib.suppress(Exception):  # what cannot be copied is left alone
            state[name] = copy.deepcopy(getattr(obj, name))

    def restore() -> None:
        for name, value in state.items():
            setattr(obj, name, value)
        if hasattr(obj, "__dict__") and not isinstance(obj, nn.Module):
            for name in set(vars(obj)) - before:  # made by the dry step's update
                if _is_state(vars(obj)[name]):
                    delattr(obj, name)

    return restore


def _is_state(value: Any, depth: int = 0) -> bool:
    if value is None or isinstance(value, (numbers.Number, torch.Tensor, str)):
        return True
    if depth < 3 and isinstance(value, (list, tuple, set)):
        return all(_is_state(v, depth + 1) for v in value)
    if depth < 3 and isinstance(value, Mapping):
        return all(_is_state(v, depth + 1) for v in value.values())
    return False
