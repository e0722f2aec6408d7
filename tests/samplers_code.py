"""User code for tests/unit/engine/test_samplers.py: data sets, sampler factories, recording models.

Every training sample carries its index (the first input column of the tabular set, the
first column of a padded text batch), and the models append the indices of each
training micro-batch they see to ``$SEEN.<rank>`` (one JSON list a line), so a test
reads which samples each process trained on, in order. The engine's dry step runs the
model in eval mode and is not recorded.
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    WeightedRandomSampler,
)


def record(indices: torch.Tensor) -> None:
    path = os.environ.get("SEEN")
    if path:
        with open(f"{path}.{os.environ.get('RANK', '0')}", "a") as f:
            f.write(json.dumps(indices.long().tolist()) + "\n")


class Imbalanced(Dataset):
    """``n`` samples, one in ``every`` of class 1; input ``[index, 4 features]``."""

    def __init__(self, n: int = 200, every: int = 10, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.targets = (torch.arange(n) % every == 0).long()
        self.x = torch.randn(n, 4, generator=g) + 1.5 * self.targets[:, None]

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):
        return torch.cat([torch.tensor([float(i)]), self.x[i]]), self.targets[i]


def data(n: int = 200, every: int = 10):
    return {"train": Imbalanced(n, every), "val": Imbalanced(64, every, seed=1)}


def balanced(dataset, num_samples: int | None = None):
    """Class balancing: each class drawn equally often (with replacement)."""
    counts = torch.bincount(dataset.targets)
    weights = (1.0 / counts.double())[dataset.targets]
    return WeightedRandomSampler(weights, num_samples or len(dataset), replacement=True)


def balanced_fixed_generator(dataset):
    """A balancing sampler holding its own generator, seeded once by the user."""
    counts = torch.bincount(dataset.targets)
    weights = (1.0 / counts.double())[dataset.targets]
    return WeightedRandomSampler(weights, len(dataset), generator=torch.Generator().manual_seed(5))


def distributed(dataset):
    """A sampler already sharded by hand: the engine refuses it (it shards itself)."""
    return DistributedSampler(dataset, num_replicas=1, rank=0)


class NumpyShuffle(Sampler[int]):
    """A sampler that draws from NumPy's global generator, minority class twice."""

    def __init__(self, dataset) -> None:
        self.base = np.arange(len(dataset))
        self.extra = np.flatnonzero(dataset.targets.numpy() == 1)

    def __iter__(self):
        return iter(np.random.permutation(np.concatenate([self.base, self.extra])).tolist())

    def __len__(self) -> int:
        return len(self.base) + len(self.extra)


class Net(torch.nn.Module):
    """A linear classifier over the features; records the index column when training."""

    def __init__(self, num_classes: int = 2) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, num_classes)

    def forward(self, x):
        if self.training:
            record(x[:, 0])
        return self.lin(x[:, 1:])


# --- text: variable lengths, a length-bucketing batch sampler, a padding collate ---


def length_of(i: int) -> int:
    return 1 + (i * 7) % 9


class Texts(Dataset):
    """Token sequences of 9 different lengths; label: is the first token even."""

    def __init__(self, n: int = 120, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.seqs = [torch.randint(1, 50, (length_of(i),), generator=g) for i in range(n)]

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, i: int):
        return self.seqs[i], int(self.seqs[i][0] % 2), i


def texts(n: int = 120):
    return {"train": Texts(n), "val": Texts(40, seed=1)}


class LengthBuckets(Sampler[list[int]]):
    """Batches of up to ``batch_size`` indices of one length, in a random order."""

    def __init__(self, dataset, batch_size: int = 4) -> None:
        by_length: dict[int, list[int]] = {}
        for i, seq in enumerate(dataset.seqs):
            by_length.setdefault(len(seq), []).append(i)
        self.batches = [
            ids[k : k + batch_size]
            for ids in by_length.values()
            for k in range(0, len(ids), batch_size)
        ]

    def __iter__(self):
        order = torch.randperm(len(self.batches)).tolist()
        return iter([self.batches[k] for k in order])

    def __len__(self) -> int:
        return len(self.batches)


def buckets(dataset, batch_size: int = 4):
    return LengthBuckets(dataset, batch_size)


def pad_collate(samples, pad_id: int = -1):
    """``(tokens padded with pad_id, with the index as column 0), labels)``."""
    width = max(len(s[0]) for s in samples)
    x = torch.full((len(samples), width + 1), pad_id, dtype=torch.long)
    for row, (seq, _, index) in enumerate(samples):
        x[row, 0] = index
        x[row, 1 : 1 + len(seq)] = seq
    return x, torch.tensor([s[1] for s in samples])


class Padder:
    """A collate class: built with its kwargs, its instance collates."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, samples):
        return pad_collate(samples, self.pad_id)


class BagNet(torch.nn.Module):
    """Mean of the embeddings of the non-pad tokens; records indices and checks padding."""

    def __init__(self, num_classes: int = 2, pad_id: int = 0) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.emb = torch.nn.Embedding(64, 8)
        self.out = torch.nn.Linear(8, num_classes)

    def forward(self, x):
        if self.training:
            record(x[:, 0])
        tokens = x[:, 1:]
        mask = (tokens != self.pad_id).float()
        emb = self.emb(tokens.clamp(min=0)) * mask[..., None]
        return self.out(emb.sum(1) / mask.sum(1, keepdim=True).clamp(min=1))


# --- DataLoaders the data callable builds itself ---


class Stream(IterableDataset):
    def __init__(self, n: int = 96) -> None:
        self.inner = Imbalanced(n)

    def __iter__(self):
        return (self.inner[i] for i in range(len(self.inner)))


def stream(n: int = 96):
    return {"train": Stream(n), "val": Imbalanced(64, seed=1)}


class MyLoader(DataLoader):
    """A DataLoader subclass with its own constructor: it cannot be rebuilt."""

    def __init__(self, dataset) -> None:
        super().__init__(dataset, batch_size=8)


def loaders(kind: str = "shuffle", n: int = 192, batch_size: int = 8):
    train, val = Imbalanced(n), Imbalanced(64, seed=1)
    if kind == "shuffle":
        loader = DataLoader(train, batch_size=batch_size, shuffle=True)
    elif kind == "weighted":
        loader = DataLoader(train, batch_size=batch_size, sampler=balanced(train))
    elif kind == "random-generator":
        sampler = RandomSampler(train, generator=torch.Generator().manual_seed(3))
        loader = DataLoader(train, batch_size=batch_size, sampler=sampler)
    elif kind == "buckets":
        loader = DataLoader(train, batch_sampler=FixedBatches(len(train), batch_size))
    elif kind == "iterable":
        loader = DataLoader(Stream(n), batch_size=batch_size)
    elif kind == "subclass":
        loader = MyLoader(train)
    else:
        raise ValueError(kind)
    return {"train": loader, "val": val}


class FixedBatches(Sampler[list[int]]):
    """Consecutive batches, shuffled with torch's global generator."""

    def __init__(self, n: int, size: int) -> None:
        self.batches = [list(range(k, min(k + size, n))) for k in range(0, n, size)]

    def __iter__(self):
        return iter([self.batches[k] for k in torch.randperm(len(self.batches)).tolist()])

    def __len__(self) -> int:
        return len(self.batches)
