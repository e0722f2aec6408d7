"""The heaviest operators of a ``torch.profiler`` recording: its operator events summed
per (operator, module), each attributed to the ``nn.Module`` whose forward ran it (for a
backward operator, the module of the forward operator that made its autograd node), or
else to the ``record_function`` range around it. Used by
:class:`~trainwell.engine.tools.profiling.StepProfiler`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# The Python tracer names a module's forward frame "nn.Module: Linear_0" (class + index).
_MODULE = "nn.Module: "
# Autograd wraps each backward node in this range; its sequence number is the forward op's.
_NODE = "autograd::engine::evaluate_function: "
# The range around each recorded step (the name torch.profiler's schedule gives it).
STEP_RANGE = "ProfilerStep#"


@dataclass
class OpStat:
    """One operator in one module, summed over the recorded steps (times in microseconds,
    memory in bytes allocated minus freed by the operator itself)."""

    name: str
    module: str
    calls: int = 0
    self_cpu_us: float = 0.0
    cpu_total_us: float = 0.0
    self_cuda_us: float = 0.0
    cpu_memory_b: int = 0
    cuda_memory_b: int = 0

    def add(self, event: Any) -> None:
        self.calls += 1
        self.self_cpu_us += event.self_cpu_time_total
        self.cpu_total_us += event.cpu_time_total
        self.self_cuda_us += getattr(event, "self_device_time_total", 0.0)
        self.cpu_memory_b += event.self_cpu_memory_usage
        self.cuda_memory_b += getattr(event, "self_device_memory_usage", 0)


def aggregate(events: Iterable[Any], by_cuda: bool = False) -> list[OpStat]:
    """Sum the profiler's operator events per (operator, module), heaviest self time first.

    Python frames, ``record_function`` ranges, autograd's node wrappers and CUDA kernels
    are not operators: they are the context (kernels are in their op's CUDA time).
    """
    events = list(events)
    where = _Where()
    for event in events:
        where.learn_forward(event)
    stats: dict[tuple[str, str], OpStat] = {}
    for event in events:
        if not _is_operator(event):
            continue
        module = where.module(event)
        key = (event.name, module)
        if key not in stats:
            stats[key] = OpStat(event.name, module)
        stats[key].add(event)
    time_of = (lambda op: op.self_cuda_us) if by_cuda else (lambda op: op.self_cpu_us)
    return sorted(stats.values(), key=time_of, reverse=True)


def _is_operator(event: Any) -> bool:
    from torch.autograd import DeviceType

    if is_python(event) or event.is_user_annotation:
        return False
    if event.device_type != DeviceType.CPU:
        return False
    return "::" in event.name and not event.name.startswith("autograd::")


@dataclass(frozen=True)
class _Context:
    """What encloses an event: its module path, the innermost ``record_function`` range,
    and the forward op (thread, sequence number) of the backward node it runs in."""

    modules: tuple[str, ...] = ()
    annotation: str = ""
    node: tuple[int, int] | None = None


class _Where:
    """Finds an event's module by walking its parents once (memoised: linear in events)."""

    def __init__(self) -> None:
        self._memo: dict[int, _Context] = {}
        self._forward: dict[tuple[int, int], str] = {}

    def learn_forward(self, event: Any) -> None:
        """Remember the module of a forward op, for the backward ops of its node."""
        if event.sequence_nr >= 0 and not is_python(event):
            modules = self._context(event.cpu_parent).modules
            if modules:
                self._forward.setdefault((event.thread, event.sequence_nr), "/".join(modules))

    def module(self, event: Any) -> str:
        ctx = self._context(event.cpu_parent)
        if ctx.modules:
            return "/".join(ctx.modules)
        if ctx.node is not None and ctx.node in self._forward:
            return f"{self._forward[ctx.node]} (backward)"
        return ctx.annotation

    def _context(self, event: Any) -> _Context:
        chain = []
        while event is not None and id(event) not in self._memo:
            chain.append(event)
            event = event.cpu_parent
        ctx = self._memo[id(event)] if event is not None else _Context()
        for node in reversed(chain):  # outermost first
            ctx = _extend(ctx, node)
            self._memo[id(node)] = ctx
        return ctx


def is_python(event: Any) -> bool:
    """A Python function's event (``nn.Module: Linear_0``, ``file.py(12): f``). Older
    torch (2.11, seen on a GPU machine) has no ``is_python_function``; its names say it.

    Example:
        >>> from types import SimpleNamespace
        >>> is_python(SimpleNamespace(name="nn.Module: Linear_0")), is_python(
        ...     SimpleNamespace(name="aten::addmm", is_python_function=False))
        (True, False)
    """
    flag = getattr(event, "is_python_function", None)
    if flag is not None:
        return bool(flag)
    name = event.name
    return name.startswith(_MODULE) or ".py(" in name


def _extend(ctx: _Context, event: Any) -> _Context:
    name = event.name
    if is_python(event) and name.startswith(_MODULE):
        return _Context((*ctx.modules, name[len(_MODULE) :]), ctx.annotation, ctx.node)
    if event.is_user_annotation and not name.startswith(STEP_RANGE):
        return _Context(ctx.modules, name, ctx.node)
    if name.startswith(_NODE) and event.sequence_nr >= 0:
        return _Context(ctx.modules, ctx.annotation, (event.fwd_thread, event.sequence_nr))
    return ctx
