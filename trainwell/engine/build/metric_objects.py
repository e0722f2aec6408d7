"""``train.metrics``: objects that see a whole split (macro-F1, AUROC, mAP, BLEU, counts).

A step's own metrics are sample averages or ``(numerator, denominator)`` ratios; a metric
over a whole split needs state: a metric object with ``update(preds, target)``,
``compute()`` and ``reset()`` (a ``torchmetrics.Metric`` as it is, or any plain class).
:class:`SplitMetrics` holds the run's objects: ``reset()`` before each evaluation pass,
``update`` on each evaluation batch with the model's outputs and the targets (the default
step) or the ``"preds"`` and ``"target"`` a user's eval step returns, and ``compute()`` at
the end, which gives ``val/NAME`` (``test/NAME``). Training steps never touch them.

On several processes each sample is seen once (the engine's evaluation shards hold no
padding), and the value equals one process's, by one of three ways per object:

- a torchmetrics object syncs its own state in ``compute()`` (every rank calls it);
- a plain object with ``merge(other)``: each rank updates its own; at the end rank 0
  merges the others' objects into its own, in rank order, and computes;
- any other plain object: each rank keeps its batches' ``preds`` and ``target``; at the
  end rank 0 gathers them, puts the samples back in the split's order, and feeds its
  object in the batches one process would have, then computes.

Rank 0's values are then sent to every rank, so all ranks judge early stopping alike.

Example:
    >>> class Count:
    ...     def __init__(self): self.n = 0
    ...     def update(self, preds, target): self.n += len(target)
    ...     def compute(self): return self.n
    ...     def reset(self): self.n = 0
    >>> sm = SplitMetrics({"count": Count()}, Placement(torch.device("cpu")))
    >>> sm.reset(); sm.update(torch.zeros(3, 2), torch.zeros(3)); sm.compute()
    {'count': 3.0}
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from trainwell.engine.distributed.placement import Placement, broadcast_object
from trainwell.engine.step.step_fn import OBJECT_INPUTS, LossStep
from trainwell.errors import UserError
from trainwell.imports import call_with, resolve

if TYPE_CHECKING:
    from trainwell.engine.build.preflight import Task

KEY = "train.metrics"
METHODS = ("update", "compute", "reset")


def check_metric_specs(specs: Any) -> None:
    """The config's shape, before anything is imported: ``{NAME: {name, kwargs}}`` (or
    ``NAME: 'pkg.module:Cls'``), each NAME a plain word that is not ``loss``.

    Example:
        >>> check_metric_specs({"f1": {"name": "my.metrics:F1", "kwarg": {}}})
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: train.metrics.f1: unknown key 'kwarg'; write {name: ...
    """
    if not isinstance(specs, Mapping):
        raise UserError(f"{KEY}: expected a mapping NAME: {{name, kwargs}}; got {specs!r}")
    for name, spec in specs.items():
        where = f"{KEY}.{name}"
        _check_name(name, KEY)
        if isinstance(spec, str):
            spec = {"name": spec}
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            raise UserError(f"{where}: {spec!r} is not 'pkg.module:Cls' or {{name, kwargs}}")
        unknown = sorted(set(spec) - {"name", "kwargs"})
        if unknown:
            raise UserError(f"{where}: unknown key {unknown[0]!r}; write {{name: "
                            "'pkg.module:Cls', kwargs: {...}}")  # fmt: skip
        if ":" not in spec["name"]:
            raise UserError(f"{where}: {spec['name']!r} is not an import path 'pkg.module:Cls'")
        if not isinstance(spec.get("kwargs") or {}, Mapping):
            raise UserError(f"{where}.kwargs: expected a mapping; got {spec['kwargs']!r}")


def _check_name(name: Any, key: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name != name.strip():
        raise UserError(f"{key}: {name!r} is not a metric name (a word, no '/')")
    if name == "loss":
        raise UserError(f"{key}.loss: 'loss' is the step's own; name the metric differently")


def build_metric_objects(specs: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """The objects ``train.metrics`` names, built with their kwargs, on ``device`` where
    they are modules (torchmetrics'), each checked to have update, compute and reset."""
    check_metric_specs(specs)
    objects = {}
    for name, spec in specs.items():
        where = f"{KEY}.{name}"
        spec = {"name": spec} if isinstance(spec, str) else spec
        factory = resolve(spec["name"], where)
        if not callable(factory):
            raise UserError(f"{where}: {spec['name']!r} is a {type(factory).__name__}, not a class")
        obj = _checked(call_with(factory, dict(spec.get("kwargs") or {}), {}, where), where,
                       spec["name"])  # fmt: skip
        if isinstance(obj, nn.Module):
            obj = obj.to(device)  # its state must sit where the model's outputs are
        objects[name] = obj
    return objects


def split_metrics(
    specs: Mapping[str, Any],
    task: Task,
    eval_step: Any,
    place: Placement,
    given: Mapping[str, Any] | None = None,
) -> SplitMetrics | None:
    """The run's :class:`SplitMetrics` from ``train.metrics`` and the objects ``given``
    to ``fit(metrics=...)`` (``None`` without either), refused up front where evaluation
    could not feed them or their names clash."""
    if not specs and not given:
        return None
    if not isinstance(eval_step, LossStep) and not task.eval_inputs:
        raise UserError(
            f"{KEY}: the eval step returns no 'preds' and 'target'; return them beside the "
            "loss ({'loss': loss, 'preds': outputs, 'target': y}) to feed the metric objects"
        )
    step_names = task.eval_metrics or ({"loss", "accuracy"} if task.classification
                                       else {"loss"})  # fmt: skip
    objects = build_metric_objects(specs, place.device)
    for name, obj in (given or {}).items():
        _check_name(name, "fit(metrics=...)")
        if name in objects:
            raise UserError(f"fit(metrics=...): {name!r} is in train.metrics too; keep one")
        objects[name] = _checked(obj, f"fit(metrics=...): {name!r}", type(obj).__name__)
        if isinstance(obj, nn.Module):
            objects[name] = obj.to(place.device)
    for name in objects:
        if name in step_names:
            raise UserError(f"{KEY}.{name}: the eval step already returns a metric {name!r}; "
                            "name the metric object differently")  # fmt: skip
    return SplitMetrics(objects, place)


def _checked(obj: Any, where: str, shown: str) -> Any:
    missing = [m for m in METHODS if not callable(getattr(obj, m, None))]
    if missing:
        raise UserError(f"{where}: {shown} has no {', '.join(missing)}(); a metric object "
                        "has update(preds, target), compute() and reset()")  # fmt: skip
    return obj


def syncs_itself(obj: Any) -> bool:
    """A torchmetrics object (its ``compute()`` all-reduces its state over processes),
    told by its classes, so torchmetrics need not be imported to ask."""
    return any(cls.__module__.split(".")[0] == "torchmetrics" for cls in type(obj).__mro__)


class SplitMetrics:
    """The run's metric objects for one evaluation pass after another (see the module)."""

    def __init__(self, objects: Mapping[str, Any], place: Placement) -> None:
        self.objects = dict(objects)
        self.place = place
        distributed = place.distributed
        # Updated batch by batch on this process; the rest are fed on rank 0 at the end.
        self.local = {n: o for n, o in self.objects.items()
                      if not distributed or syncs_itself(o) or _merges(o)}  # fmt: skip
        self.replayed = {n: o for n, o in self.objects.items() if n not in self.local}
        self.held: list[tuple[Any, Any]] = []
        self.batch_size: int | None = None  # the replay's batches (None: as they came)

    @property
    def names(self) -> list[str]:
        return list(self.objects)

    def higher_is_better(self) -> dict[str, bool]:
        """What each object says of itself (torchmetrics' ``higher_is_better``)."""
        said = {n: getattr(o, "higher_is_better", None) for n, o in self.objects.items()}
        return {n: v for n, v in said.items() if isinstance(v, bool)}

    def reset(self, strided_batch: int | None = None) -> None:
        """Before a pass. ``strided_batch``: the shards are the engine's (rank r holds
        samples r, r + N, ...) in batches of this size, so a replay can restore one
        process's batches; ``None`` for any other loader."""
        for name, obj in self.objects.items():
            _call(name, obj.reset)
        self.held = []
        self.batch_size = strided_batch

    def update(self, preds: Any, target: Any) -> None:
        """One evaluation batch (no sync)."""
        for name, obj in self.local.items():
            _call(name, obj.update, preds, target)
        if self.replayed:
            self.held.append((_detached(preds), _detached(target)))

    def update_from(self, out: Any) -> None:
        """Feed the ``"preds"`` and ``"target"`` of an eval step's mapping."""
        if not isinstance(out, Mapping) or not all(k in out for k in OBJECT_INPUTS):
            shown = ", ".join(map(str, out)) if isinstance(out, Mapping) else type(out).__name__
            raise UserError(
                f"{KEY}: the eval step returned {shown}; to feed the metric objects it must "
                "return 'preds' and 'target' beside 'loss'"
            )
        self.update(out["preds"], out["target"])

    def compute(self) -> dict[str, float]:
        """``{NAME: value}`` (a mapping result gives ``NAME/key``), the same on every rank."""
        values: dict[str, float] = {}
        if not self.place.distributed:
            for name, obj in self.objects.items():
                values.update(_values(name, _call(name, obj.compute)))
            return values
        for name, obj in self.local.items():
            if syncs_itself(obj):  # a collective: every rank computes
                values.update(_values(name, _call(name, obj.compute)))
        merged = {n: o for n, o in self.local.items() if not syncs_itself(o)}
        if merged:
            values.update(self._merge(merged))
        if self.replayed:
            values.update(self._replay())
        return broadcast_object(self._ordered(values) if self.place.is_main else None, self.place)

    def _ordered(self, values: dict[str, float]) -> dict[str, float]:
        """In the config's order, as on one process (a sort is stable: keys keep theirs)."""
        at = {name: i for i, name in enumerate(self.objects)}
        return dict(sorted(values.items(), key=lambda kv: at[kv[0].partition("/")[0]]))

    def _merge(self, objects: dict[str, Any]) -> dict[str, float]:
        """Rank 0 merges every rank's objects into its own, in rank order, and computes."""
        gathered = _gather_to_main({n: _cpu(o) for n, o in objects.items()}, self.place)
        if gathered is None:
            return {}
        values: dict[str, float] = {}
        for name, obj in objects.items():
            for other in gathered[1:]:
                _call(name, obj.merge, other[name])
            values.update(_values(name, _call(name, obj.compute)))
        return values

    def _replay(self) -> dict[str, float]:
        """Rank 0 feeds every rank's batches, in the split's order, to its objects."""
        gathered = _gather_to_main([(_cpu(p), _cpu(t)) for p, t in self.held], self.place)
        self.held = []
        if gathered is None:
            return {}
        values: dict[str, float] = {}
        for name, obj in self.replayed.items():
            for preds, target in in_split_order(gathered, self.batch_size):
                _call(name, obj.update, preds, target)
            values.update(_values(name, _call(name, obj.compute)))
        return values


def _merges(obj: Any) -> bool:
    return callable(getattr(obj, "merge", None))


def _call(name: str, method: Any, *args: Any) -> Any:
    """A metric object's method; its error is one line naming the metric."""
    try:
        return method(*args)
    except UserError:
        raise
    except Exception as exc:
        detail = " ".join(str(exc).split())[:200]
        raise UserError(
            f"{KEY}.{name}: {type(method.__self__).__name__}.{method.__name__} failed: "
            f"{type(exc).__name__}: {detail}"
        ) from exc


def _values(name: str, result: Any) -> dict[str, float]:
    """``compute()``'s result as floats: a number, or a mapping of numbers."""
    if isinstance(result, Mapping):
        return {f"{name}/{k}": _number(f"{name}/{k}", v) for k, v in result.items()}
    return {name: _number(name, result)}


def _number(name: str, value: Any) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    shown = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else (
        repr(value)[:60])  # fmt: skip
    raise UserError(
        f"{KEY}.{name}: compute() returned {shown}; return a number (e.g. average the "
        "classes) or a dict of numbers"
    )


def _detached(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else value


def _cpu(value: Any) -> Any:
    """Tensors to the CPU for the gather (pickled CUDA tensors would land on the sender's
    GPU index); other objects as they are."""
    return value.cpu() if isinstance(value, torch.Tensor) else value


def _gather_to_main(obj: Any, place: Placement) -> list[Any] | None:
    """Every rank's ``obj`` on rank 0, in rank order; ``None`` on the other ranks."""
    out: list[Any] | None = [None] * place.world_size if place.is_main else None
    dist.gather_object(obj, out, dst=0)
    return out


def in_split_order(ranks: list[list[tuple[Any, Any]]], batch_size: int | None) -> Iterator:
    """``(preds, target)`` batches of all ranks. With the engine's strided shards, the
    samples go back to their places in the split and are cut into one process's batches;
    otherwise (or if they do not join up) each rank's batches as they came, in rank order.

    Example:
        >>> rank0 = [(torch.tensor([0, 2]), torch.tensor([0, 2]))]  # samples 0 and 2
        >>> rank1 = [(torch.tensor([1, 3]), torch.tensor([1, 3]))]
        >>> [p.tolist() for p, _ in in_split_order([rank0, rank1], batch_size=2)]
        [[0, 1], [2, 3]]
    """
    if batch_size is not None:
        joined = _interleave(ranks)
        if joined is not None:
            preds, target = joined
            total = _length(preds)
            for start in range(0, total, batch_size):
                yield preds[start : start + batch_size], target[start : start + batch_size]
            return
    yield from itertools.chain.from_iterable(ranks)


def _interleave(ranks: list[list[tuple[Any, Any]]]) -> tuple[Any, Any] | None:
    """Rank r's i-th sample back at place r + i * N (:class:`ShardSampler`'s layout)."""
    try:
        columns = [[_join([b[k] for b in batches]) for k in (0, 1)] for batches in ranks]
        return _weave([c[0] for c in columns]), _weave([c[1] for c in columns])
    except (TypeError, ValueError, RuntimeError, _Uneven):
        return None


class _Uneven(Exception):
    """The shards do not fit the strided layout: replay the batches as they came."""


def _join(parts: list[Any]) -> Any:
    if not parts:
        return None
    if all(isinstance(p, torch.Tensor) and p.dim() > 0 for p in parts):
        return torch.cat(parts)
    if all(isinstance(p, (list, tuple)) for p in parts):
        return [x for p in parts for x in p]
    raise _Uneven


def _length(value: Any) -> int:
    return int(value.shape[0]) if isinstance(value, torch.Tensor) else len(value)


def _weave(shards: list[Any]) -> Any:
    present = [s for s in shards if s is not None]
    if not present:
        raise _Uneven
    world = len(shards)
    total = sum(_length(s) for s in present)
    for rank, shard in enumerate(shards):
        if (0 if shard is None else _length(shard)) != len(range(rank, total, world)):
            raise _Uneven
    first = present[0]
    out: torch.Tensor | list[Any]
    if isinstance(first, torch.Tensor):
        out = first.new_empty((total, *first.shape[1:]))
    else:
        out = [None] * total
    for rank, shard in enumerate(shards):
        if shard is not None:
            out[rank::world] = shard
    return out
