"""data.sampler, data.batch_sampler and user DataLoaders on 1 and 2 processes.

The user code is tests/samplers_code.py: every training sample carries its index and the
models record, per process, the indices of each training micro-batch, so the tests read
which samples each rank trained on (real torchrun, gloo, for two processes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    WeightedRandomSampler,
)

import trainwell
from tests.conftest import REPO, read_summary
from trainwell.config import load_config
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.engine.loading.samplers import (
    ShardedBatchSampler,
    ShardedSampler,
    draw_epoch,
    shard_loader,
)
from trainwell.errors import UserError

CODE = "tests.samplers_code"
QUIET = Console(quiet=True)
TABULAR = [
    f"data.name={CODE}:data",
    f"model.name={CODE}:Net",
    "train.precision=fp32",
    "data.batch_size=16",
]
TEXT = [
    f"data.name={CODE}:texts",
    f"model.name={CODE}:BagNet",
    f"data.batch_sampler={CODE}:buckets",
    f"data.collate={{name: '{CODE}:pad_collate', kwargs: {{pad_id: 0}}}}",
    "train.precision=fp32",
]


def train_cli(tmp_path: Path, name: str, *overrides: str, nproc: int = 1, resume=None):
    """``trainwell train`` as a subprocess (``--nproc 2``: torchrun, gloo); returns the run
    directory, its stdout, and what each rank trained on (a list of micro-batches)."""
    seen = tmp_path / f"{name}.seen"
    args = [sys.executable, "-m", "trainwell", "train", *overrides, f"run.dir={tmp_path / name}"]
    if nproc > 1:
        args += ["--nproc", str(nproc)]
    if resume is not None:
        args += ["--resume", str(resume)]
    proc = subprocess.run(
        args, cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "SEEN": str(seen), "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return tmp_path / name, proc.stdout, [read_seen(seen, r) for r in range(nproc)]


def read_seen(seen: Path, rank: int) -> list[list[int]]:
    path = Path(f"{seen}.{rank}")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def fit(tmp_path: Path, name: str, *overrides: str, resume=None, monkeypatch=None):
    seen = tmp_path / f"{name}.seen"
    monkeypatch.setenv("SEEN", str(seen))
    cfg = load_config(overrides=[*overrides, f"run.dir={tmp_path / name}"])
    result = trainwell.fit(cfg, resume=resume, console=QUIET)
    return result, read_seen(seen, 0)


def assert_same_last(a: Path, b: Path) -> None:
    """The last weights and optimizer moments of two runs are bit for bit the same."""
    ref, got = (load_checkpoint(run / "checkpoints" / "last.pt") for run in (a, b))
    for name, tensor in ref["model"].items():
        assert torch.equal(tensor, got["model"][name]), name
    for i, moments in ref["optimizer"]["state"].items():
        for key, value in moments.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(
                got["optimizer"]["state"][i][key])), key  # fmt: skip


def steps_of(micro_batches: list[list[int]], accum: int) -> list[list[int]]:
    """The micro-batches grouped into optimizer steps (their indices sorted)."""
    starts = range(0, len(micro_batches), accum)
    return [sorted(sum(micro_batches[k : k + accum], [])) for k in starts]


def minority_share(indices: list[int], every: int = 10) -> float:
    return sum(i % every == 0 for i in indices) / len(indices)


# --- the balancing sampler, 1 and 2 processes ---


# One two-process run of the balancing sampler (3 epochs, a checkpoint every 4 steps),
# shared: it trains as one process does, and resuming it mid epoch is exact.
BALANCED = [*TABULAR, f"data.sampler={CODE}:balanced", "train.epochs=3",
            "checkpoint.every_steps=4", "checkpoint.keep_last=100"]  # fmt: skip


@pytest.fixture(scope="module")
def balanced_two(tmp_path_factory):
    """(run dir, stdout, what each rank trained on) of BALANCED on two processes."""
    return train_cli(tmp_path_factory.mktemp("balanced"), "full", *BALANCED, nproc=2)


@pytest.mark.slow
@pytest.mark.parametrize("accum, batch", [(1, 16), (2, 32)])
def test_balancing_sampler_is_sharded_and_trains_as_one_process(
    tmp_path, monkeypatch, request, accum, batch
):
    if accum == 1:  # BALANCED itself: the shared two-process run
        common, epochs = BALANCED, 3
        two_dir, out, (r0, r1) = request.getfixturevalue("balanced_two")
    else:
        epochs = 2
        common = [*TABULAR, f"data.sampler={CODE}:balanced", "train.epochs=2",
                  f"train.grad_accum_steps={accum}", f"data.batch_size={batch}"]  # fmt: skip
        two_dir, out, (r0, r1) = train_cli(tmp_path, "two", *common, nproc=2)
    _, one = fit(tmp_path, "one", *common, monkeypatch=monkeypatch)
    one_dir = tmp_path / "one"
    per_epoch = 200 // batch  # 200 training samples (the val split is given)
    assert len(one) == len(r0) == len(r1) == epochs * per_epoch * accum
    # Each optimizer step: the two ranks' samples together are the one-process step's.
    for a, b, o in zip(steps_of(r0, accum), steps_of(r1, accum), steps_of(one, accum)):
        assert sorted(a + b) == o
        assert a != b  # not the same batch on both ranks (the bug of the issue)
    assert all(len(m) == batch // (2 * accum) for m in r0 + r1)
    # The sampler balances (1 in 10 is class 1 in the data), on each rank.
    for rank in (r0, r1):
        assert 0.3 < minority_share(sum(rank, [])) < 0.7
    # Reseeded per epoch: epoch 1 is not epoch 0 again.
    half = per_epoch * accum
    assert sum(one[:half], []) != sum(one[half : 2 * half], [])
    s1, s2 = read_summary(one_dir), read_summary(two_dir)
    assert s2["world_size"] == 2 and s2["steps_per_epoch"] == s1["steps_per_epoch"] == per_epoch
    assert s2["batch"]["micro"] == batch // (2 * accum)
    for key in ("train/loss", "val/loss"):
        assert s2["final"][key] == pytest.approx(s1["final"][key], rel=1e-4)


@pytest.mark.slow
def test_sampler_resume_mid_epoch_on_two_processes_is_exact(tmp_path, balanced_two):
    full, _, (f0, f1) = balanced_two
    # 12 steps an epoch: step 16 is 4 steps into epoch 1.
    ckpt = full / "checkpoints" / "step-16.pt"
    assert load_checkpoint(ckpt)["data"]["steps_into_epoch"] == 4
    again, out, (a0, a1) = train_cli(tmp_path, "again", *BALANCED, nproc=2, resume=ckpt)
    assert "resuming from" in out
    assert (a0, a1) == (f0[16:], f1[16:])
    assert_same_last(full, again)
    for key in ("train/loss", "val/loss", "val/accuracy"):
        assert read_summary(again)["final"][key] == read_summary(full)["final"][key]


@pytest.mark.slow
@pytest.mark.parametrize(
    "sampler",
    [
        f"{CODE}:balanced",
        f"{CODE}:balanced_fixed_generator",
        f"{CODE}:NumpyShuffle",
        "{name: 'torch.utils.data:RandomSampler', kwargs: {replacement: true, num_samples: 150}}",
    ],
)
def test_resume_mid_epoch_with_a_sampler_is_exact(tmp_path, monkeypatch, sampler):
    common = [*TABULAR, f"data.sampler={sampler}", "train.epochs=2",
              "checkpoint.every_steps=5", "checkpoint.keep_last=100"]  # fmt: skip
    full, seen = fit(tmp_path, "full", *common, monkeypatch=monkeypatch)
    per_epoch = len(seen) // 2
    assert seen[:per_epoch] != seen[per_epoch:]  # a new order each epoch
    into_second = 5 * (per_epoch // 5 + 1)  # a checkpoint part-way through epoch 1
    assert per_epoch < into_second < 2 * per_epoch
    first = sampler.endswith(":balanced")
    for step in (5, into_second) if first else (into_second,):
        ckpt = tmp_path / "full" / "checkpoints" / f"step-{step}.pt"
        again, rest = fit(tmp_path, f"from-{step}", *common, resume=ckpt, monkeypatch=monkeypatch)
        assert rest == seen[step:], step
        assert again.metrics == full.metrics
        assert_same_last(tmp_path / "full", tmp_path / f"from-{step}")
    if first:  # the order comes from run.seed: another seed, another order
        _, other = fit(tmp_path, "other", *common, "run.seed=7", monkeypatch=monkeypatch)
        assert other != seen and len(other) == len(seen)


# --- a batch sampler: length buckets, padded by a collate with kwargs ---


@pytest.mark.slow
def test_length_buckets_on_one_and_two_processes(tmp_path, monkeypatch):
    from tests.samplers_code import length_of

    common = [*TEXT, "train.epochs=2"]
    _, one = fit(tmp_path, "one", *common, monkeypatch=monkeypatch)
    one_dir = tmp_path / "one"
    two_dir, out2, (r0, r1) = train_cli(tmp_path, "two", *common, nproc=2)
    assert "data.batch_sampler makes the batches" in out2 and "2 processes x 1" in out2
    # 120 texts in train (the val split is given): lengths 1..9, batches of <= 4 of one length.
    n_batches = sum(-(-sum(length_of(i) == n for i in range(120)) // 4) for n in range(1, 10))
    assert len(one) == 2 * n_batches
    assert len(r0) == len(r1) == 2 * (n_batches // 2)
    for batch in one + r0 + r1:
        assert len({length_of(i) for i in batch}) == 1, batch  # one bucket per batch
    # One process: every text once an epoch, the batches in a new order each epoch.
    assert sorted(sum(one[:n_batches], [])) == list(range(120))
    assert one[:n_batches] != one[n_batches:]
    # Two processes: each rank its own batches of the epoch, none on both.
    for epoch in range(2):
        part = slice(epoch * (n_batches // 2), (epoch + 1) * (n_batches // 2))
        a, b = sum(r0[part], []), sum(r1[part], [])
        assert not set(a) & set(b)
        assert len(set(a + b)) == len(a + b) >= 120 - 2 * 4
    s1, s2 = read_summary(one_dir), read_summary(two_dir)
    assert s1["steps_per_epoch"] == n_batches and s2["steps_per_epoch"] == n_batches // 2
    assert s2["batch"]["global"] is None  # the batch sampler decides, not data.batch_size


@pytest.mark.slow
@pytest.mark.parametrize("accum, collate", [
    (1, f"{{name: '{CODE}:pad_collate', kwargs: {{pad_id: 0}}}}"),
    (3, f"{{name: '{CODE}:Padder', kwargs: {{pad_id: 0}}}}"),
])  # fmt: skip
def test_batch_sampler_resume_mid_epoch_is_exact(tmp_path, monkeypatch, accum, collate):
    common = [*TEXT, f"data.collate={collate}", "train.epochs=2", f"train.grad_accum_steps={accum}",
              "checkpoint.every_steps=3", "checkpoint.keep_last=100"]  # fmt: skip
    full, seen = fit(tmp_path, "full", *common, monkeypatch=monkeypatch)
    ckpt = tmp_path / "full" / "checkpoints" / "step-3.pt"
    again, rest = fit(tmp_path, "again", *common, resume=ckpt, monkeypatch=monkeypatch)
    assert rest == seen[3 * accum :]
    assert again.metrics == full.metrics
    assert_same_last(tmp_path / "full", tmp_path / "again")


# --- DataLoaders the data callable built ---


@pytest.mark.slow
def test_a_user_loader_with_a_sampler_is_sharded_on_two_processes(tmp_path, monkeypatch):
    base = [f"data.name={CODE}:loaders", f"model.name={CODE}:Net", "train.precision=fp32",
            "train.epochs=2"]  # fmt: skip
    _, one = fit(tmp_path, "one", *base, monkeypatch=monkeypatch)
    one_dir = tmp_path / "one"
    two_dir, out, (r0, r1) = train_cli(tmp_path, "two", *base, nproc=2)
    assert "is sharded over 2 processes" in out and "every process sees" not in out
    # 192 samples, batch 8 per process: 24 steps an epoch alone, 12 on two processes.
    assert len(one) == 48 and len(r0) == len(r1) == 24
    for epoch in range(2):
        part = slice(epoch * 12, (epoch + 1) * 12)
        a, b = sum(r0[part], []), sum(r1[part], [])
        assert sorted(a + b) == list(range(192))  # shuffle=True: each sample once, over the ranks
    assert r0[:12] != r0[12:]  # reshuffled per epoch
    s1, s2 = read_summary(one_dir), read_summary(two_dir)
    assert (s1["steps_per_epoch"], s2["steps_per_epoch"]) == (24, 12)
    assert s2["final"]["train/loss"] != s1["final"]["train/loss"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["weighted", "buckets"])
def test_user_loaders_of_other_samplers_are_sharded(tmp_path, kind):
    base = [f"data.name={CODE}:loaders", f"data.kwargs.kind={kind}", f"model.name={CODE}:Net",
            "train.epochs=1", "train.precision=fp32"]  # fmt: skip
    _, out, (r0, r1) = train_cli(tmp_path, "two", *base, nproc=2)
    assert "is sharded over 2 processes" in out
    assert len(r0) == len(r1) == 12 and all(len(b) == 8 for b in r0 + r1)
    assert r0 != r1
    if kind == "weighted":
        assert all(0.3 < minority_share(sum(r, [])) < 0.7 for r in (r0, r1))
    else:  # every sample once over the ranks
        assert sorted(sum(r0 + r1, [])) == list(range(192))


@pytest.mark.slow
@pytest.mark.parametrize("kind, why", [("iterable", "IterableDataset")])
def test_a_loader_that_cannot_be_sharded_says_so_in_one_line(tmp_path, kind, why):
    base = [f"data.name={CODE}:loaders", f"data.kwargs.kind={kind}", f"model.name={CODE}:Net",
            "train.epochs=1", "train.max_steps=6", "train.precision=fp32"]  # fmt: skip
    _, out, (r0, r1) = train_cli(tmp_path, "two", *base, nproc=2)
    lines = [line for line in out.splitlines() if "every process sees the same data" in line]
    assert len(lines) == 1 and why in lines[0], out
    assert r0 == r1 and len(r0) == 6  # as the warning says


@pytest.mark.slow
def test_a_user_loader_on_one_process_is_used_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv("SEEN", str(tmp_path / "seen"))
    cfg = load_config(overrides=[f"data.name={CODE}:loaders", f"model.name={CODE}:Net",
                                 "train.epochs=1", f"run.dir={tmp_path / 'r'}"])  # fmt: skip
    with open(os.devnull, "w") as sink:
        out = Console(record=True, width=300, file=sink)
        trainwell.fit(cfg, console=out)
    text = out.export_text()
    assert "training on the DataLoader the data gave" in text and "sharded" not in text


# --- the sharding itself, unit by unit ---


@pytest.mark.parametrize("world, n", [(2, 10), (3, 10), (4, 7), (3, 3)])
def test_shards_are_disjoint_equal_and_the_drawn_epoch(world, n):
    inner = RandomSampler(range(n), generator=torch.Generator().manual_seed(1))
    shards = [ShardedSampler(inner, r, world, seed=4, size=n) for r in range(world)]
    for epoch in (0, 1):
        for s in shards:
            s.set_epoch(epoch)
        parts = [list(s) for s in shards]
        assert len({len(p) for p in parts}) == 1 and len(parts[0]) == n // world
        drawn = draw_epoch(inner, 4, epoch)
        assert sorted(sum(parts, [])) == sorted(drawn[: (n // world) * world])
        # Interleaved as DistributedSampler is: rank r holds items r, r + world, ...
        assert parts[1 % world] == drawn[1 % world : (n // world) * world : world]


def test_a_sampler_yielding_fewer_some_epochs_is_padded_to_its_length():
    class Shrinking(torch.utils.data.Sampler):
        calls = 0

        def __iter__(self):
            self.calls += 1
            return iter(range(10 if self.calls == 1 else 5))

        def __len__(self):
            return 10

    s = ShardedSampler(Shrinking(), 0, 2, seed=0, size=10)
    assert list(s) == [0, 2, 4, 6, 8]
    s.set_epoch(1)  # 5 indices this time, wrapped around to 10
    assert list(s) == [0, 2, 4, 1, 3] and len(s) == 5


def test_a_sampler_without_len_is_counted_from_its_first_epoch():
    class NoLen(torch.utils.data.Sampler):
        def __iter__(self):
            return iter(torch.randperm(9).tolist())

    s = ShardedSampler(NoLen(), 1, 2, seed=0, size=9)
    assert len(s) == 4 and len(set(s)) == 4


def test_batch_shards_take_every_other_batch_and_skip():
    batches = BatchSampler(SequentialSampler(range(20)), batch_size=3, drop_last=False)
    s = ShardedBatchSampler(batches, 1, 2, seed=0, size=20)
    assert list(s) == [[3, 4, 5], [9, 10, 11], [15, 16, 17]]
    s.set_epoch(0, skip=2)
    assert list(s) == [[15, 16, 17]] and len(s) == 1


def test_draw_epoch_leaves_the_global_generators_alone():
    import random

    import numpy as np

    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    expected = torch.rand(1), np.random.rand(), random.random()
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    draw_epoch(WeightedRandomSampler([1.0, 2.0, 3.0], 50), seed=3, epoch=2)
    draw_epoch(RandomSampler(range(50)), seed=3, epoch=2)
    assert (torch.rand(1), np.random.rand(), random.random()) == expected


def test_a_fixed_user_generator_is_left_as_it_was():
    g = torch.Generator().manual_seed(5)
    state = g.get_state()
    sampler = WeightedRandomSampler([1.0, 1.0, 1.0], 20, generator=g)
    assert draw_epoch(sampler, 0, 0) == draw_epoch(sampler, 0, 0) != draw_epoch(sampler, 0, 1)
    assert sampler.generator is g and torch.equal(g.get_state(), state)


@pytest.mark.parametrize("bad, message", [
    ([0, 1, 99], "index 99, outside the training data (10 samples)"),
    ([0, -1], "index -1"),
    (["a", "b"], "yielded 'a', not an integer index"),
    ([], "yielded nothing"),
])  # fmt: skip
def test_a_sampler_yielding_bad_indices_is_one_line(bad, message):
    s = ShardedSampler(bad, 0, 1, seed=0, size=10)
    with pytest.raises(UserError) as err:
        list(s)
    assert str(err.value).startswith("data.sampler: ") and message in str(err.value)


def test_shard_loader_keeps_the_loaders_settings():
    def collate(samples):
        return torch.tensor(samples)

    def init(worker_id):
        pass

    data = list(range(40))
    loader = DataLoader(data, batch_size=4, shuffle=True, drop_last=True, collate_fn=collate,
                        num_workers=2, pin_memory=True, worker_init_fn=init, timeout=30,
                        persistent_workers=True, prefetch_factor=3)  # fmt: skip
    new, reason = shard_loader(loader, 1, 2, seed=0)
    assert reason is None and new is not loader
    assert isinstance(new.sampler, ShardedSampler) and new.sampler.inner is loader.sampler
    for attr in ("batch_size", "drop_last", "collate_fn", "num_workers", "pin_memory",
                 "worker_init_fn", "timeout", "persistent_workers", "prefetch_factor"):  # fmt: skip
        assert getattr(new, attr) == getattr(loader, attr), attr
    assert len(new) == 5


def test_a_loader_subclass_or_a_stream_is_not_rebuilt():
    from tests.samplers_code import MyLoader, Stream

    for loader, why in ((MyLoader(list(range(16))), "MyLoader, a DataLoader subclass"),
                        (DataLoader(Stream(16), batch_size=4), "IterableDataset")):  # fmt: skip
        new, reason = shard_loader(loader, 0, 2, seed=0)
        assert new is loader and why in reason


def test_a_loader_with_its_own_generator_is_sharded_into_one_permutation():
    g = torch.Generator().manual_seed(3)
    sampler = RandomSampler(range(30), generator=g)
    loader = DataLoader(list(range(30)), batch_size=5, sampler=sampler)
    for epoch in (0, 1):
        shards = [shard_loader(loader, r, 3, seed=1)[0] for r in range(3)]
        for s in shards:
            s.sampler.set_epoch(epoch)
        got = [[int(x) for batch in s for x in batch] for s in shards]
        assert sorted(sum(got, [])) == list(range(30)) and all(len(g) == 10 for g in got)
    assert loader.sampler.generator is g


def test_a_loader_sharded_by_its_own_distributed_sampler_is_left_alone():
    data = list(range(12))
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, 2, 0))
    assert shard_loader(loader, 0, 2, seed=0) == (loader, None)


def test_a_loader_without_batching_is_sharded_by_its_items():
    loader = DataLoader(list(range(10)), batch_size=None, shuffle=False)
    new, reason = shard_loader(loader, 0, 2, seed=0)
    assert reason is None and [int(x) for x in new] == [0, 2, 4, 6, 8]


# --- config and bad input: one line, exit 2 ---


@pytest.mark.parametrize("overrides, message", [
    (["data.sampler=42"], "data.sampler: 42 is not 'pkg.module:Cls' or {name, kwargs}"),
    (["data.sampler=balanced"], "data.sampler: 'balanced' is not an import path"),
    (["data.sampler={name: 'a:b', kwarg: {}}"], "data.sampler: unknown key 'kwarg'"),
    (["data.collate={name: 'a:b', kwargs: 3}"], "data.collate: kwargs must be a mapping"),
    ([f"data.sampler={CODE}:balanced", f"data.batch_sampler={CODE}:buckets"],
     "data.sampler and data.batch_sampler are both set"),
])  # fmt: skip
def test_bad_sampler_config_is_one_line(cli, overrides, message):
    code, out, err = cli("train", *TABULAR, *overrides)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("overrides, message", [
    (["data.sampler=torch.nn:Identity"], "the factory returned Identity, not a sampler"),
    ([f"data.sampler={CODE}:distributed"], "returned a DistributedSampler"),
    ([f"data.sampler={{name: '{CODE}:balanced', kwargs: {{weights: 1}}}}"],
     "data.sampler: cannot call balanced"),
    ([f"data.name={CODE}:loaders", f"data.sampler={CODE}:balanced"],
     "data.sampler: the training data is a DataLoader"),
    ([f"data.name={CODE}:stream", f"data.batch_sampler={CODE}:buckets", "train.max_steps=3"],
     "data.batch_sampler: the training data is an IterableDataset"),
    ([f"data.collate={{name: '{CODE}:pad_collate', kwargs: {{pad: 0}}}}"],
     "data.collate: cannot call"),
])  # fmt: skip
def test_bad_sampler_factories_are_one_line(cli, overrides, message):
    code, out, err = cli("train", *TABULAR, "train.epochs=1", *overrides)
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1, err


# --- data.collate with kwargs ---


@pytest.mark.parametrize("spec", [
    f"{{name: '{CODE}:pad_collate', kwargs: {{pad_id: 7}}}}",
    f"{{name: '{CODE}:Padder', kwargs: {{pad_id: 7}}}}",
])  # fmt: skip
def test_collate_kwargs_from_a_yaml_file_pad_with_the_given_id(tmp_path, spec):
    from tests.samplers_code import Texts
    from trainwell.config import to_yaml
    from trainwell.data import build_collate

    (tmp_path / "c.yaml").write_text(f"data:\n  collate: {spec}\n")
    cfg = load_config(tmp_path / "c.yaml")
    texts = Texts()
    x, _ = build_collate(cfg.data.collate)([texts[0], texts[1]])  # lengths 1 and 8
    assert x[0, 2:].tolist() == [7] * 7 and (x[1, 1:] != 7).all()
    # The run's config.yaml holds it and loads back the same.
    (tmp_path / "again.yaml").write_text(to_yaml(cfg))
    assert load_config(tmp_path / "again.yaml").data.collate == cfg.data.collate


def test_a_plain_collate_path_is_the_function_itself():
    from tests.samplers_code import pad_collate
    from trainwell.data import build_collate

    assert build_collate(f"{CODE}:pad_collate") is pad_collate and build_collate("") is None
