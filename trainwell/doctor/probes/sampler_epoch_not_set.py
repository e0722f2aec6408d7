"""The ``sampler-epoch-not-set`` probe."""

from __future__ import annotations

from trainwell.doctor.events import (
    BatchEvent,
    Reporter,
)
from trainwell.doctor.findings import Finding


class SamplerEpochNotSetProbe:
    """``sampler-epoch-not-set``: a shuffling ``DistributedSampler`` starting another pass
    with the epoch number of a pass already done: it yields that pass's order again.

    A pass counts once half of it has been read (``next(iter(loader))`` to peek at a
    batch is not an epoch). Samplers are told apart by their dataset, seed and rank, so
    a sampler made anew each epoch (always at epoch 0) is seen too.
    """

    def __init__(self) -> None:
        self.done: dict[tuple, int] = {}  # sampler key -> epoch of the last pass read
        self.reading: dict[int, tuple[tuple, int, int]] = {}  # id(iterator) -> key, epoch, half

    def on_batch(self, doc: Reporter, event: BatchEvent) -> None:
        reading = self.reading.get(id(event.loader)) if self.reading else None
        if reading is not None and event.index >= reading[2]:
            del self.reading[id(event.loader)]
            self.done[reading[0]] = reading[1]
        if event.index != 1:
            return
        from torch.utils.data.distributed import DistributedSampler

        sampler = getattr(event.loader, "_index_sampler", None)
        try:
            batches = len(sampler)
        except TypeError:  # an IterableDataset's sampler has no length
            return
        sampler = getattr(sampler, "sampler", sampler)
        if not isinstance(sampler, DistributedSampler) or not sampler.shuffle:
            return
        key = (id(sampler.dataset), sampler.seed, sampler.rank, sampler.num_replicas)
        self.reading[id(event.loader)] = (key, sampler.epoch, max(2, batches // 2))
        if self.done.get(key) != sampler.epoch or event.site is None:
            return
        doc.add(
            Finding(
                code="sampler-epoch-not-set",
                severity="error",
                file=event.site.file,
                line=event.site.line,
                message="a shuffling DistributedSampler starts another epoch with epoch "
                f"still {sampler.epoch}: every epoch sees the same order",
                why="DistributedSampler seeds its shuffle with seed + epoch; without "
                "set_epoch the 'shuffle' is one fixed permutation",
                fix="call sampler.set_epoch(epoch) at the start of each epoch, before "
                "iterating the DataLoader",
                evidence={"epoch": sampler.epoch},
            )
        )
