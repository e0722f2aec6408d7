"""Evaluation over a whole split: the eval step's means and the ``train.metrics`` objects.

Each sample counts once, on one process or N: the engine's evaluation loaders shard
without padding (:class:`~trainwell.engine.distributed.placement.ShardSampler`); a user's
``DataLoader`` with a ``DistributedSampler`` pads the last shards with repeated samples,
which are cut off here; a user's loader that is not sharded at all (every rank would see
every batch) is evaluated one batch in N per rank.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset

from trainwell.engine.build.metric_objects import SplitMetrics
from trainwell.engine.distributed.placement import Placement, ShardSampler, gather_objects
from trainwell.engine.loading.batch import sample_count, to_device
from trainwell.engine.state.metrics import MetricSums
from trainwell.engine.step.precision import Precision
from trainwell.engine.step.step_fn import NARROW_INTS, LossStep, StepFn, split_pair, unpack
from trainwell.errors import UserError


@dataclass
class Evaluator:
    """Means of the eval step's loss and metrics over a loader, in eval mode, no grad,
    and the values of the metric objects (``metrics``) over the same samples.

    Sums stay on the device and are read once at the end; on several processes they are
    summed over ranks, each holding a disjoint shard, so every sample counts once. The
    model's train/eval mode is restored afterwards.

    Example:
        >>> from torch.utils.data import TensorDataset
        >>> loader = DataLoader(TensorDataset(torch.zeros(4, 2), torch.tensor([0, 1, 1, 1])))
        >>> p = Precision.build("fp32", torch.device("cpu"))
        >>> ev = Evaluator(nn.Linear(2, 2), LossStep(nn.CrossEntropyLoss(), accuracy=True), p,
        ...                Placement(torch.device("cpu")))
        >>> sorted(ev(loader))
        ['accuracy', 'loss']
    """

    model: nn.Module
    eval_step: StepFn
    precision: Precision
    place: Placement

    # FSDP: each forward gathers weights from every rank, so every rank must run as many
    # forwards as the one with the most batches (its shard of the data may be longer).
    lockstep: bool = False
    channels_last: bool = False
    # train.metrics: fed every evaluation batch; None (no objects) costs nothing.
    metrics: SplitMetrics | None = None

    def __post_init__(self) -> None:
        if self.metrics is not None and isinstance(self.eval_step, LossStep):
            # The loss-built step returns a loss; the objects want the outputs and targets.
            self.eval_step = LossStepOutputs(self.eval_step)

    @torch.inference_mode()
    def __call__(self, loader: DataLoader) -> dict[str, float]:
        device, objects = self.place.device, self.metrics
        was_training = self.model.training
        self.model.eval()
        sums = MetricSums(device, torch.float64)
        if objects is not None:
            objects.reset(_strided_batch(loader))
        batch, count = None, 0
        for batch in eval_batches(loader, self.place):
            batch = to_device(batch, device, self.channels_last)
            out = self._forward(batch)
            if objects is not None:
                objects.update_from(out)
            _, metrics, n = unpack(out, sample_count(batch), "the eval step")
            sums.add(metrics, n)
            count += 1
        if self.lockstep:
            self._keep_pace(batch, count)
        self.model.train(was_training)
        means = sums.means(self.place)
        if objects is not None:
            means.update(objects.compute())
        return means

    def _forward(self, batch: Any) -> Any:
        with self.precision.autocast():
            return self.eval_step(self.model, batch)

    def _keep_pace(self, last_batch: Any, count: int) -> None:
        """Forwards whose results are dropped, until this rank has run as many as the
        busiest rank (their weight gathers need every rank)."""
        most = int(max(gather_objects(count, self.place)))
        if count < most and last_batch is None:
            raise UserError(
                "evaluation with dist.strategy=fsdp: this process's shard of the evaluation "
                "data is empty (fewer samples than processes); use more evaluation samples"
            )
        for _ in range(most - count):
            self._forward(last_batch)


def eval_batches(loader: Iterable[Any], place: Placement) -> Iterator[Any]:
    """This rank's batches of ``loader``, each sample of the split on exactly one rank.

    Example:
        >>> from torch.utils.data import TensorDataset
        >>> ds = TensorDataset(torch.arange(5))
        >>> s = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=False)  # pads to 6
        >>> place = Placement(torch.device("cpu"), rank=1, world_size=2)
        >>> [b[0].tolist() for b in eval_batches(DataLoader(ds, 2, sampler=s), place)]
        [[1, 3]]
    """
    if not place.distributed or not isinstance(loader, DataLoader):
        return iter(loader)
    sampler = loader.sampler
    if isinstance(sampler, ShardSampler) or isinstance(loader.dataset, IterableDataset):
        return iter(loader)  # an iterable must shard itself by rank, as in training
    if isinstance(sampler, DistributedSampler):
        if sampler.drop_last or sampler.num_replicas != place.world_size:
            return iter(loader)
        # Its padding repeats the first samples at the end of the order, where the
        # positions past the split's length are: this rank's real ones come first.
        # Sized: DistributedSampler took the data set's len() when it was built.
        size = len(cast(Sized, sampler.dataset))
        real = len(range(sampler.rank, size, sampler.num_replicas))
        return _first_samples(iter(loader), real)
    if hasattr(sampler, "num_replicas") and hasattr(sampler, "rank"):
        return iter(loader)  # a sampler of the user's that shards by rank itself
    # The same batches on every rank: each takes one in world_size.
    return itertools.islice(iter(loader), place.rank, None, place.world_size)


def _strided_batch(loader: Any) -> int | None:
    """The batch size of the engine's strided shards, for the metric objects' replay."""
    if isinstance(loader, DataLoader) and isinstance(loader.sampler, ShardSampler):
        return loader.batch_size
    return None


def _first_samples(batches: Iterator[Any], n: int) -> Iterator[Any]:
    """The batches up to ``n`` samples, the last one cut to fit."""
    left = n
    for batch in batches:
        if left <= 0:
            return
        count = sample_count(batch)
        if count > left:
            batch = slice_batch(batch, count, left)
        left -= min(count, left)
        yield batch


def slice_batch(batch: Any, count: int, keep: int) -> Any:
    """The first ``keep`` samples of a ``count``-sample batch: every tensor and list whose
    leading size is ``count`` is cut; other leaves pass.

    Example:
        >>> slice_batch({"x": torch.arange(4), "ids": ["a", "b", "c", "d"], "k": 7}, 4, 2)
        {'x': tensor([0, 1]), 'ids': ['a', 'b'], 'k': 7}
    """
    if isinstance(batch, torch.Tensor):
        return batch[:keep] if batch.dim() > 0 and batch.shape[0] == count else batch
    if isinstance(batch, Mapping):
        return {k: slice_batch(v, count, keep) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(slice_batch(v, count, keep) for v in batch))
    if isinstance(batch, (list, tuple)):
        if len(batch) == count and not any(isinstance(v, torch.Tensor) for v in batch):
            return batch[:keep]  # a column of per-sample values (ids, strings)
        return type(batch)(slice_batch(v, count, keep) for v in batch)
    return batch


@dataclass
class LossStepOutputs:
    """The step built from ``train.loss``, also returning the model's outputs as
    ``"preds"`` and the targets as ``"target"``, for the metric objects.

    Example:
        >>> step = LossStepOutputs(LossStep(nn.CrossEntropyLoss(), accuracy=True))
        >>> sorted(step(nn.Linear(2, 3), (torch.zeros(4, 2), torch.tensor([0, 1, 2, 0]))))
        ['accuracy', 'loss', 'preds', 'target']
    """

    step: LossStep

    def __call__(self, model: nn.Module, batch: Any) -> dict[str, Any]:
        seen: list[Any] = []

        def forward(inputs: Any) -> Any:
            outputs = model(inputs)
            seen.append(outputs)
            return outputs

        result = self.step(forward, batch)  # type: ignore[arg-type]  # any callable model
        targets = split_pair(batch)[1]
        if isinstance(targets, torch.Tensor) and targets.dtype in NARROW_INTS:
            targets = targets.long()  # as the loss saw them
        out = dict(result) if isinstance(result, Mapping) else {"loss": result}
        out["preds"], out["target"] = seen[-1], targets
        return out
