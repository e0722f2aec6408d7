"""Held-out tests of the step contract of ``trainwell.fit``, written from the contract only.

The contract: ``step(model, batch)`` gets any nesting of tuples, lists, dicts, dataclasses and
named tuples of tensors (non-tensor leaves pass through) and returns a scalar loss or a
mapping ``{"loss": ..., "name": scalar, "batch_size": weight}``; other keys become
``train/``, ``val/``, ``test/`` metrics averaged with the batch's weight. Bad input raises
``trainwell.UserError`` with one line, before training starts.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

import trainwell
from tests.conftest import is_machine_metric

REPO = Path(__file__).resolve().parents[3]
TRAINWELL_BIN = REPO / ".venv" / "bin" / "trainwell"

BASE = [
    "train.epochs=2",
    "data.batch_size=16",
    "train.precision=fp32",
    "doctor.enabled=false",
    "data.eval_batch_size=8",
]


# ----------------------------------------------------------------------------- helpers


def make_cfg(tmp_path: Path, *extra: str, name: str = "run"):
    return trainwell.load_config(None, overrides=[*BASE, f"run.dir={tmp_path / name}", *extra])


def read_metrics_csv(run_dir: Path) -> list[dict]:
    with open(Path(run_dir) / "metrics.csv") as f:
        # The machine's rows (memory, throughput) differ between identical runs.
        rows = [r for r in csv.DictReader(f) if not is_machine_metric(r["name"])]
    for r in rows:
        r["step"] = int(r["step"])
        r["value"] = float(r["value"])
    return rows


def csv_values(run_dir: Path, split: str, name: str) -> list[tuple[int, float]]:
    return [
        (r["step"], r["value"])
        for r in read_metrics_csv(run_dir)
        if r["split"] == split and r["name"] == name
    ]


def state_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_not_started(run_dir: Path, model: nn.Module, init: dict[str, torch.Tensor]):
    """The error came before training: no completed/running run, weights untouched."""
    summary = Path(run_dir) / "summary.json"
    if summary.exists():
        status = json.loads(summary.read_text()).get("status")
        assert status not in ("completed", "running"), status
    for k, v in model.state_dict().items():
        assert torch.equal(v, init[k]), f"weights changed before the error: {k}"


def assert_one_line(err: BaseException):
    msg = str(err)
    assert msg.strip(), "empty error message"
    assert "\n" not in msg.strip(), f"message is not one line: {msg!r}"


def find_state_dict(obj, keys: set[str]):
    """The (nested) mapping in a checkpoint whose keys are the model's state_dict keys."""
    if isinstance(obj, dict):
        if set(obj.keys()) == keys:
            return obj
        for v in obj.values():
            found = find_state_dict(v, keys)
            if found is not None:
                return found
    return None


def find_key(obj, key: str):
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            found = find_key(v, key)
            if found is not None:
                return found
    return None


def write_module(tmp_path: Path, monkeypatch, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)


def reg_data(n: int, seed: int, offset: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    w = torch.tensor([1.0, -2.0, 0.5, 3.0])
    y = x @ w + 0.1 * torch.randn(n, generator=g)
    v = torch.arange(offset, offset + n, dtype=torch.float32)
    return x, y, v


def cls_data(n: int, seed: int, classes: int = 3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return x, y.clamp(max=classes - 1)


class DictDS(Dataset):
    """Samples are dicts with a string id first, then tensors."""

    def __init__(self, n: int, seed: int, offset: int = 0):
        self.x, self.y, self.v = reg_data(n, seed, offset)
        self.offset = offset

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"id": f"s{i + self.offset}", "x": self.x[i], "y": self.y[i], "v": self.v[i]}


def reg_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Linear(4, 1)


def dict_step(model, batch):
    pred = model(batch["x"]).squeeze(-1)
    err = pred - batch["y"]
    return {"loss": (err**2).mean(), "mae": err.abs().mean()}


# ----------------------------------------------------------------------------- batch structures


@pytest.mark.slow
def test_dict_batches_with_string_ids_and_test_metrics_from_best_weights(tmp_path):
    seen = []

    def step(model, batch):
        if model.training:
            seen.append(batch)
        return dict_step(model, batch)

    train, val, test = DictDS(64, 0), DictDS(20, 1, 1000), DictDS(12, 2, 2000)
    result = trainwell.fit(
        make_cfg(tmp_path, "optim.lr=0.05"),
        model=reg_model(),
        train_data=train,
        val_data=val,
        test_data=test,
        step_fn=step,
    )
    assert all(isinstance(b, dict) and set(b) == {"id", "x", "y", "v"} for b in seen)
    b = seen[-1]
    assert isinstance(b["id"], (list, tuple)) and all(isinstance(s, str) for s in b["id"])
    assert all(s.startswith("s") for s in b["id"]) and len(b["id"]) == 16
    assert b["x"].shape == (16, 4) and isinstance(b["x"], torch.Tensor)
    for key in ("train/loss", "val/loss", "val/mae", "test/loss", "test/mae"):
        assert key in result.metrics and isinstance(result.metrics[key], float), key
    # test metrics come from the returned (best) weights, averaged over samples
    with torch.no_grad():
        err = result.model(test.x).squeeze(-1) - test.y
    assert result.metrics["test/mae"] == pytest.approx(err.abs().mean().item(), rel=1e-5)
    assert result.metrics["test/loss"] == pytest.approx((err**2).mean().item(), rel=1e-5)
    # it trained: below the loss of the initial weights
    with torch.no_grad():
        init_err = reg_model()(val.x).squeeze(-1) - val.y
    assert result.metrics["val/loss"] < 0.9 * (init_err**2).mean().item()
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert (result.run_dir / "checkpoints" / "last.pt").exists()
    assert (result.run_dir / "checkpoints" / "best.pt").exists()
    assert csv_values(result.run_dir, "val", "mae")


def test_nested_dict_batches(tmp_path):
    seen = []

    class NestedDS(DictDS):
        def __getitem__(self, i):
            return {
                "inputs": {"a": self.x[i, :2], "b": self.x[i, 2:]},
                "meta": {"id": f"n{i}"},
                "y": self.y[i],
            }

    def step(model, batch):
        if model.training:
            seen.append(batch)
        x = torch.cat([batch["inputs"]["a"], batch["inputs"]["b"]], dim=1)
        return F.mse_loss(model(x).squeeze(-1), batch["y"])

    result = trainwell.fit(
        make_cfg(tmp_path, "train.epochs=1"),
        model=reg_model(),
        train_data=NestedDS(32, 0),
        val_data=NestedDS(8, 1),
        step_fn=step,
    )
    b = seen[-1]
    assert isinstance(b["inputs"], dict) and b["inputs"]["a"].shape == (16, 2)
    assert list(b["meta"]["id"])[:1] and all(s.startswith("n") for s in b["meta"]["id"])
    assert math.isfinite(result.metrics["val/loss"])


class Sample(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor
    tag: str


class NTDS(Dataset):
    def __init__(self, n, seed):
        self.x, self.y, _ = reg_data(n, seed)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return Sample(self.x[i], self.y[i], f"t{i}")


def test_named_tuple_batches_keep_their_type(tmp_path):
    seen = []

    def step(model, batch):
        if model.training:
            seen.append((type(batch), batch))
        return {
            "loss": F.mse_loss(model(batch.x).squeeze(-1), batch.y),
            "n_tags": torch.tensor(float(len(batch.tag))),
        }

    result = trainwell.fit(
        make_cfg(tmp_path, "train.epochs=1"),
        model=reg_model(),
        train_data=NTDS(32, 0),
        val_data=NTDS(8, 1),
        step_fn=step,
    )
    assert all(t is Sample for t, _ in seen)
    t, b = seen[-1]
    assert b.x.shape == (16, 4) and b.y.shape == (16,)
    assert all(isinstance(s, str) and s.startswith("t") for s in b.tag)
    # val: one batch of 8 samples, 8 tags
    assert result.metrics["val/n_tags"] == pytest.approx(8.0)


@dataclasses.dataclass
class DCBatch:
    x: torch.Tensor
    y: torch.Tensor
    ids: list


@dataclasses.dataclass(frozen=True)
class FrozenBatch:
    x: torch.Tensor
    y: torch.Tensor
    ids: tuple


def dc_collate(samples):
    x, y = torch.stack([s[0] for s in samples]), torch.stack([s[1] for s in samples])
    return DCBatch(x, y, [f"d{i}" for i in range(len(samples))])


def frozen_collate(samples):
    x, y = torch.stack([s[0] for s in samples]), torch.stack([s[1] for s in samples])
    return FrozenBatch(x, y, tuple(f"f{i}" for i in range(len(samples))))


@pytest.mark.parametrize("collate,cls", [(dc_collate, DCBatch), (frozen_collate, FrozenBatch)])
def test_dataclass_batches_from_a_user_dataloader(tmp_path, collate, cls):
    x, y, _ = reg_data(32, 0)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=False, collate_fn=collate)
    seen = []

    def step(model, batch):
        if model.training:
            seen.append(batch)
        return {
            "loss": F.mse_loss(model(batch.x).squeeze(-1), batch.y),
            "first_x": batch.x[0, 0].detach().clone(),
        }

    xv, yv, _ = reg_data(8, 1)
    val = DataLoader(TensorDataset(xv, yv), batch_size=8, collate_fn=collate)
    result = trainwell.fit(
        make_cfg(tmp_path, "train.epochs=1"),
        model=reg_model(),
        train_data=loader,
        val_data=val,
        step_fn=step,
    )
    assert all(type(b) is cls for b in seen)
    b = seen[-1]
    assert isinstance(b.x, torch.Tensor) and b.x.shape == (8, 4)
    assert torch.equal(b.x, x[24:32])  # the loader's last batch
    assert list(b.ids) == [f"{'d' if cls is DCBatch else 'f'}{i}" for i in range(8)]
    assert result.metrics["val/first_x"] == pytest.approx(xv[0, 0].item())


def test_nested_tuple_batches(tmp_path):
    class PairDS(Dataset):
        def __init__(self, n, seed):
            self.x, self.y, _ = reg_data(n, seed)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return (self.x[i, :1], self.x[i, 1:]), self.y[i]

    seen = []

    def step(model, batch):
        (a, b), y = batch
        if model.training:
            seen.append((a.shape, b.shape, y.shape))
        return F.mse_loss(model(torch.cat([a, b], 1)).squeeze(-1), y)

    result = trainwell.fit(
        make_cfg(tmp_path, "train.epochs=1"),
        model=reg_model(),
        train_data=PairDS(32, 0),
        val_data=PairDS(8, 1),
        step_fn=step,
    )
    assert seen[-1] == ((16, 1), (16, 3), (16,))
    assert math.isfinite(result.metrics["val/loss"]) and result.metrics["val/loss"] > 0


@pytest.mark.slow
def test_list_batches(tmp_path):
    class ListDS(Dataset):
        def __init__(self, n, seed):
            self.x, self.y, _ = reg_data(n, seed)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return [self.x[i], self.y[i], f"id{i}"]

    seen = []

    def step(model, batch):
        if model.training:
            seen.append(batch)
        x, y, ids = batch
        return {
            "loss": F.mse_loss(model(x).squeeze(-1), y),
            "idlen": torch.tensor(float(sum(len(s) for s in ids)) / len(ids)),
        }

    result = trainwell.fit(
        make_cfg(tmp_path, "train.epochs=1"),
        model=reg_model(),
        train_data=ListDS(32, 0),
        val_data=ListDS(8, 1),
        step_fn=step,
    )
    assert all(isinstance(b, list) and len(b) == 3 for b in seen)
    assert all(isinstance(s, str) for s in seen[-1][2]) and len(seen[-1][2]) == 16
    assert result.metrics["val/idlen"] == pytest.approx(3.0)  # "id0".."id7"


# Documented: before training the engine calls the step once, in train mode
# with grad, on a 2-sample batch cut from samples 0 and 1 (a user DataLoader's first batch
# is fed twice; an IterableDataset is iterated once more). The model state is restored
# (see the BatchNorm test below), but the step itself sees a batch that is not the data's.
def test_step_sees_only_the_datas_batches(tmp_path):
    # Ambiguous: the contract says bad output is caught "on the first batch"; a step called
    # on something that is not one of the data's batches (another size) can break steps
    # that rely on the batch size and surprises a step with side effects.
    sizes = []

    def step(model, batch):
        if model.training:
            sizes.append(len(batch["id"]))
        return dict_step(model, batch)

    trainwell.fit(
        make_cfg(tmp_path),
        model=reg_model(),
        train_data=DictDS(64, 0),
        val_data=DictDS(8, 1),
        step_fn=step,
    )
    # The dry step before training (documented) sees the first two samples, then 8 real
    # steps see the data's batches.
    assert sizes == [2] + [16] * 8


@pytest.mark.slow
def test_first_batch_check_leaves_no_trace_in_the_model(tmp_path):
    # BatchNorm running stats after one epoch are those of the 4 training batches alone.
    xs = []

    def step(model, batch):
        if model.training and len(batch["x"]) == 16:
            xs.append(batch["x"].clone())
        return dict_step(model, batch)

    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 1))
    result = trainwell.fit(
        make_cfg(tmp_path, "train.epochs=1"),
        model=model,
        train_data=DictDS(64, 0),
        val_data=DictDS(8, 1),
        step_fn=step,
    )
    assert len(xs) == 4
    rm, rv = torch.zeros(4), torch.ones(4)
    for x in xs:
        rm = 0.9 * rm + 0.1 * x.mean(0)
        rv = 0.9 * rv + 0.1 * x.var(0, unbiased=True)
    bn = result.model[0]
    assert int(bn.num_batches_tracked) == 4
    assert torch.allclose(bn.running_mean, rm, atol=1e-6)
    assert torch.allclose(bn.running_var, rv, atol=1e-6)


# ----------------------------------------------------------------------------- metrics


def test_eval_metrics_are_weighted_by_the_leading_size_of_the_first_tensor(tmp_path):
    eval_sizes = []

    def step(model, batch):
        if not torch.is_grad_enabled():
            eval_sizes.append(len(batch["x"]))
        out = dict_step(model, batch)
        out["vmean"] = batch["v"].mean()
        return out

    val = DictDS(20, 1, offset=0)  # v = 0..19, batches of 8, 8, 4
    result = trainwell.fit(
        make_cfg(tmp_path, "train.epochs=1"),
        model=reg_model(),
        train_data=DictDS(32, 0),
        val_data=val,
        step_fn=step,
    )
    assert sorted(set(eval_sizes)) == [4, 8]  # several eval batches of unequal size
    # weighted by batch size: the mean of all 20 values (an unweighted mean would be 10.83)
    assert result.metrics["val/vmean"] == pytest.approx(9.5, rel=1e-6)
    assert csv_values(result.run_dir, "val", "vmean")[-1][1] == pytest.approx(9.5, rel=1e-6)


@pytest.mark.parametrize("as_tensor", [False, True])
def test_batch_size_key_weights_the_eval_metrics(tmp_path, as_tensor):
    def step(model, batch):
        out = dict_step(model, batch)
        keep = batch["v"] % 3 == 0  # a different number of kept items per batch
        n = int(keep.sum())
        out["kept_mean"] = batch["v"][keep].mean()
        out["batch_size"] = torch.tensor(n) if as_tensor else n
        return out

    val = DictDS(20, 1)  # kept: 0,3,...,18 -> mean 9; per-batch weights 3,3,1
    result = trainwell.fit(
        make_cfg(tmp_path, "train.epochs=1"),
        model=reg_model(),
        train_data=DictDS(32, 0),
        val_data=val,
        step_fn=step,
    )
    assert result.metrics["val/kept_mean"] == pytest.approx(9.0, rel=1e-6)
    # "batch_size" is a weight, not a metric
    assert not any(k.endswith("/batch_size") for k in result.metrics)
    assert not [r for r in read_metrics_csv(result.run_dir) if r["name"] == "batch_size"]


def test_batch_size_key_weights_the_train_metric_window(tmp_path):
    def step(model, batch):
        out = dict_step(model, batch)
        keep = batch["v"] % 5 == 0
        out["kept_mean"] = batch["v"][keep].mean() if keep.any() else torch.tensor(0.0)
        out["batch_size"] = int(keep.sum())
        return out

    train = DictDS(64, 0)  # 4 steps of 16 (shuffled); kept: 0,5,...,60 -> mean 30
    cfg = make_cfg(tmp_path, "train.epochs=1", "train.log_every=4")
    result = trainwell.fit(
        cfg, model=reg_model(), train_data=train, val_data=DictDS(8, 1), step_fn=step
    )
    assert result.metrics["train/kept_mean"] == pytest.approx(30.0, rel=1e-6)
    assert csv_values(result.run_dir, "train", "kept_mean") == [(4, pytest.approx(30.0))]


@pytest.mark.parametrize("kind", ["OrderedDict", "Mapping"])
def test_step_may_return_any_mapping(tmp_path, kind):
    import collections
    import collections.abc

    class Frozen(collections.abc.Mapping):
        def __init__(self, d):
            self.d = d

        def __getitem__(self, k):
            return self.d[k]

        def __iter__(self):
            return iter(self.d)

        def __len__(self):
            return len(self.d)

    wrap = collections.OrderedDict if kind == "OrderedDict" else Frozen

    def step(model, batch):
        return wrap({**dict_step(model, batch), "const": torch.tensor(2.5)})

    result = trainwell.fit(
        make_cfg(tmp_path, "train.epochs=1"),
        model=reg_model(),
        train_data=DictDS(32, 0),
        val_data=DictDS(8, 1),
        step_fn=step,
    )
    assert result.metrics["val/const"] == 2.5 and result.metrics["train/const"] == 2.5
    assert "val/mae" in result.metrics


def test_integer_scalar_metric_is_weighted_like_any_other(tmp_path):
    def step(model, batch):
        out = dict_step(model, batch)
        out["evens"] = (batch["v"] % 2 == 0).sum()  # an int64 0-d tensor
        return out

    # val v = 0..19 in batches of 8, 8, 4: counts 4, 4, 2 weighted 8, 8, 4 -> 72 / 20
    result = trainwell.fit(
        make_cfg(tmp_path, "train.epochs=1"),
        model=reg_model(),
        train_data=DictDS(32, 0),
        val_data=DictDS(20, 1),
        step_fn=step,
    )
    assert result.metrics["val/evens"] == pytest.approx(3.6)
    assert isinstance(result.metrics["val/evens"], float)


def test_train_metrics_are_weighted_across_accumulation_micro_steps(tmp_path):
    sizes = []

    def step(model, batch):
        if model.training:
            sizes.append(len(batch["v"]))
        out = dict_step(model, batch)
        out["vmean"] = batch["v"].mean()
        return out

    # 4 optimizer steps of 2 micro-batches of 8; the epoch's window holds all 64 samples
    cfg = make_cfg(tmp_path, "train.epochs=1", "train.grad_accum_steps=2", "train.log_every=4")
    result = trainwell.fit(
        cfg, model=reg_model(), train_data=DictDS(64, 0), val_data=DictDS(8, 1), step_fn=step
    )
    assert sizes[-8:] == [8] * 8
    assert result.metrics["train/vmean"] == pytest.approx(31.5, rel=1e-6)
    assert [s for s, _ in csv_values(result.run_dir, "train", "vmean")] == [4]


def test_default_eval_runs_the_step_in_inference_mode_and_eval_mode(tmp_path):
    class DropNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.lin(self.drop(x))

    def step(model, batch):
        out = dict_step(model, batch)
        out["inference"] = torch.tensor(float(torch.is_inference_mode_enabled()))
        out["training"] = torch.tensor(float(model.training))
        out["grad"] = torch.tensor(float(torch.is_grad_enabled()))
        out["const"] = torch.tensor(3.0)
        return out

    torch.manual_seed(0)
    result = trainwell.fit(
        make_cfg(tmp_path, "train.epochs=1", "train.log_every=1"),
        model=DropNet(),
        train_data=DictDS(32, 0),
        val_data=DictDS(16, 1),
        test_data=DictDS(8, 2),
        step_fn=step,
    )
    m = result.metrics
    assert m["train/inference"] == 0.0 and m["train/training"] == 1.0 and m["train/grad"] == 1.0
    assert m["val/inference"] == 1.0 and m["val/training"] == 0.0 and m["val/grad"] == 0.0
    assert m["test/inference"] == 1.0 and m["test/training"] == 0.0
    assert m["train/const"] == 3.0 and m["val/const"] == 3.0 and m["test/const"] == 3.0


def test_metrics_only_in_the_eval_step(tmp_path):
    calls = {"train": 0, "eval": 0}

    def step(model, batch):
        calls["train"] += 1
        return {"loss": dict_step(model, batch)["loss"], "train_only": torch.tensor(1.5)}

    def eval_step(model, batch):
        calls["eval"] += 1
        out = dict_step(model, batch)
        out["loss"] = torch.tensor(7.0)  # a distinct loss: proves this step ran for eval
        return out

    result = trainwell.fit(
        make_cfg(tmp_path, "train.log_every=2"),
        model=reg_model(),
        train_data=DictDS(32, 0),
        val_data=DictDS(20, 1),
        test_data=DictDS(8, 2),
        step_fn=step,
        eval_step_fn=eval_step,
    )
    m = result.metrics
    assert m["val/loss"] == pytest.approx(7.0) and m["test/loss"] == pytest.approx(7.0)
    assert "val/mae" in m and "test/mae" in m
    assert "train/mae" not in m and m["train/loss"] != pytest.approx(7.0)
    assert m["train/train_only"] == pytest.approx(1.5)
    assert "val/train_only" not in m and "test/train_only" not in m
    names = {(r["split"], r["name"]) for r in read_metrics_csv(result.run_dir)}
    assert ("val", "mae") in names and ("train", "mae") not in names
    # 2 epochs x 2 steps of training; 2 val passes of 3 batches + test
    assert calls["train"] <= 5 and calls["eval"] >= 6


@pytest.mark.slow
def test_eval_step_and_step_by_import_path(tmp_path, monkeypatch):
    write_module(
        tmp_path,
        monkeypatch,
        "tw_steps_a",
        """
        import torch
        import torch.nn.functional as F
        def step(model, batch):
            x, y = batch
            return {"loss": F.cross_entropy(model(x), y), "from_step": torch.tensor(1.0)}
        def eval_step(model, batch):
            x, y = batch
            return {"loss": F.cross_entropy(model(x), y), "from_eval": torch.tensor(2.0)}
    """,
    )
    x, y = cls_data(64, 0)
    xv, yv = cls_data(16, 1)
    cfg = make_cfg(
        tmp_path,
        "train.step=tw_steps_a:step",
        "train.eval_step=tw_steps_a:eval_step",
        "train.log_every=2",
    )
    torch.manual_seed(0)
    result = trainwell.fit(
        cfg, model=nn.Linear(4, 3), train_data=TensorDataset(x, y), val_data=TensorDataset(xv, yv)
    )
    m = result.metrics
    assert m["train/from_step"] == 1.0 and m["val/from_eval"] == 2.0
    assert "val/from_step" not in m and "train/from_eval" not in m
    assert "val/accuracy" not in m  # a user step: no accuracy added


# ----------------------------------------------------------------------------- default step


@pytest.mark.slow
def test_default_step_accuracy_and_loss_match_the_returned_model(tmp_path):
    x, y = cls_data(64, 0)
    xt, yt = cls_data(24, 2)
    torch.manual_seed(0)
    result = trainwell.fit(
        make_cfg(tmp_path, "optim.lr=0.05"),
        model=nn.Linear(4, 3),
        train_data=TensorDataset(x, y),
        val_data=TensorDataset(*cls_data(16, 1)),
        test_data=TensorDataset(xt, yt),
        loss_fn=nn.CrossEntropyLoss(),
    )
    with torch.no_grad():
        out = result.model(xt)
    assert result.metrics["test/accuracy"] == pytest.approx(
        (out.argmax(1) == yt).float().mean().item()
    )
    assert result.metrics["test/loss"] == pytest.approx(F.cross_entropy(out, yt).item(), rel=1e-5)


@pytest.mark.slow
def test_default_regression_step_has_no_accuracy(tmp_path):
    x, y, _ = reg_data(64, 0)
    xv, yv, _ = reg_data(16, 1)
    result = trainwell.fit(
        make_cfg(tmp_path, "train.loss=mse"),
        model=reg_model(),
        train_data=TensorDataset(x, y[:, None]),
        val_data=TensorDataset(xv, yv[:, None]),
    )
    assert "val/accuracy" not in result.metrics
    assert "val/loss" in result.metrics and result.metrics["val/loss"] > 0


class DictInputNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 3)
        self.b = nn.Linear(2, 3, bias=False)

    def forward(self, inputs):
        return self.a(inputs["left"]) + self.b(inputs["right"])


class DictInputDS(Dataset):
    def __init__(self, n, seed):
        self.x, self.y = cls_data(n, seed)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"left": self.x[i, :2], "right": self.x[i, 2:]}, self.y[i]


@pytest.mark.slow
def test_default_step_passes_a_structured_input_to_the_model(tmp_path):
    test = DictInputDS(24, 2)
    torch.manual_seed(0)
    result = trainwell.fit(
        make_cfg(tmp_path, "data.eval_batch_size=64"),
        model=DictInputNet(),
        train_data=DictInputDS(64, 0),
        val_data=DictInputDS(16, 1),
        test_data=test,
    )
    with torch.no_grad():
        out = result.model({"left": test.x[:, :2], "right": test.x[:, 2:]})
    assert result.metrics["test/loss"] == pytest.approx(
        F.cross_entropy(out, test.y).item(), rel=1e-5
    )
    assert result.metrics["test/accuracy"] == pytest.approx(
        (out.argmax(1) == test.y).float().mean().item()
    )


LOSSES = {
    "mse": (["train.loss=mse"], lambda o, y: F.mse_loss(o, y)),
    "l1": (["train.loss=l1"], lambda o, y: F.l1_loss(o, y)),
    "smooth_l1": (["train.loss=smooth_l1"], lambda o, y: F.smooth_l1_loss(o, y)),
    "huber_path": (
        ["train.loss=torch.nn:HuberLoss", "train.loss_kwargs.delta=0.5"],
        lambda o, y: F.huber_loss(o, y, delta=0.5),
    ),
    "function_path": (["train.loss=torch.nn.functional:l1_loss"], lambda o, y: F.l1_loss(o, y)),
    "sum_reduction": (
        ["train.loss=l1", "train.loss_kwargs.reduction=sum"],
        lambda o, y: F.l1_loss(o, y, reduction="sum"),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LOSSES))
def test_default_step_regression_losses_by_config(tmp_path, name):
    extra, ref = LOSSES[name]
    x, y, _ = reg_data(64, 0)
    xt, yt, _ = reg_data(24, 2)
    model = nn.Sequential(nn.Linear(4, 1), nn.Flatten(0))
    result = trainwell.fit(
        make_cfg(tmp_path, "data.eval_batch_size=64", *extra),
        model=model,
        train_data=TensorDataset(x, y),
        val_data=TensorDataset(*reg_data(8, 1)[:2]),
        test_data=TensorDataset(xt, yt),
    )
    with torch.no_grad():
        expected = ref(result.model(xt), yt).item()
    assert result.metrics["test/loss"] == pytest.approx(expected, rel=1e-5)
    assert "test/accuracy" not in result.metrics


@pytest.mark.slow
def test_cross_entropy_class_weights_from_config(tmp_path):
    x, y = cls_data(64, 0)
    xt, yt = cls_data(24, 2)
    torch.manual_seed(0)
    result = trainwell.fit(
        make_cfg(tmp_path, "data.eval_batch_size=64", "train.loss_kwargs.weight=[1.0, 2.0, 5.0]"),
        model=nn.Linear(4, 3),
        train_data=TensorDataset(x, y),
        val_data=TensorDataset(*cls_data(8, 1)),
        test_data=TensorDataset(xt, yt),
    )
    with torch.no_grad():
        out = result.model(xt)
    expected = F.cross_entropy(out, yt, weight=torch.tensor([1.0, 2.0, 5.0])).item()
    assert expected != pytest.approx(F.cross_entropy(out, yt).item(), rel=1e-3)
    assert result.metrics["test/loss"] == pytest.approx(expected, rel=1e-5)


# fit(loss_fn=..., eval_step_fn=...) without step_fn: the loss trains, the eval step
# evaluates (was refused once, with a message naming config keys the caller never set).
@pytest.mark.slow
def test_eval_step_fn_with_the_default_train_step(tmp_path):
    x, y = cls_data(64, 0)

    def eval_step(model, batch):
        xb, yb = batch
        out = model(xb)
        return {
            "loss": F.cross_entropy(out, yb),
            "top2": (out.topk(2, 1).indices == yb[:, None]).any(1).float().mean(),
        }

    torch.manual_seed(0)
    result = trainwell.fit(
        make_cfg(tmp_path),
        model=nn.Linear(4, 3),
        train_data=TensorDataset(x, y),
        val_data=TensorDataset(*cls_data(16, 1)),
        loss_fn=nn.CrossEntropyLoss(),
        eval_step_fn=eval_step,
    )
    assert 0.0 <= result.metrics["val/top2"] <= 1.0 and "train/top2" not in result.metrics
    assert "val/accuracy" not in result.metrics  # the eval step decides the eval metrics


@pytest.mark.slow
@pytest.mark.parametrize("how", ["config", "loss_fn", "default_ignore_index"])
def test_ignore_index_targets_with_the_default_step(tmp_path, how):
    x, y = cls_data(64, 0)
    xt, yt = cls_data(16, 2)
    ignore = -100 if how == "default_ignore_index" else 255 if how == "config" else 7
    y = y.clone()
    y[::4] = ignore
    yt = yt.clone()
    yt[1::3] = ignore
    extra, kw = [], {}
    if how == "config":
        extra = ["train.loss=cross_entropy", f"train.loss_kwargs.ignore_index={ignore}"]
    elif how == "loss_fn":
        kw = {"loss_fn": nn.CrossEntropyLoss(ignore_index=ignore)}
    torch.manual_seed(0)
    result = trainwell.fit(
        make_cfg(tmp_path, "data.eval_batch_size=64", *extra),
        model=nn.Linear(4, 3),
        train_data=TensorDataset(x, y),
        val_data=TensorDataset(xt, yt),
        test_data=TensorDataset(xt, yt),
        **kw,
    )
    with torch.no_grad():
        out = result.model(xt)
    expected = F.cross_entropy(out, yt, ignore_index=ignore).item()
    assert math.isfinite(result.metrics["test/loss"])
    assert result.metrics["test/loss"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
def test_accuracy_leaves_out_ignored_targets(tmp_path):
    # Ambiguous in the contract: an accuracy that counts ignored targets as wrong is
    # plainly wrong for padding, so this checks the accuracy over the real targets.
    x, y = cls_data(64, 0)
    xt, yt = cls_data(16, 2)
    yt = yt.clone()
    yt[::2] = -100
    torch.manual_seed(0)
    result = trainwell.fit(
        make_cfg(tmp_path, "data.eval_batch_size=64"),
        model=nn.Linear(4, 3),
        train_data=TensorDataset(x, y),
        val_data=TensorDataset(xt, yt),
        test_data=TensorDataset(xt, yt),
    )
    with torch.no_grad():
        pred = result.model(xt).argmax(1)
    keep = yt != -100
    expected = (pred[keep] == yt[keep]).float().mean().item()
    assert result.metrics["test/accuracy"] == pytest.approx(expected)


def test_out_of_range_target_is_a_user_error(tmp_path):
    # Implied by "a target equal to the loss's ignore_index is not out of range".
    x, y = cls_data(32, 0)
    y = y.clone()
    y[3] = 5  # 3 classes
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    init = state_copy(model)
    with pytest.raises(trainwell.UserError) as e:
        trainwell.fit(
            make_cfg(tmp_path),
            model=model,
            train_data=TensorDataset(x, y),
            val_data=TensorDataset(*cls_data(8, 1)),
        )
    assert_one_line(e.value)
    assert "5" in str(e.value) or "range" in str(e.value).lower()
    assert_not_started(tmp_path / "run", model, init)


# ----------------------------------------------------------------------------- data sources


class Stream(IterableDataset):
    def __init__(self, seed):
        self.seed = seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        i = 0
        while True:
            x = torch.randn(4, generator=g)
            yield {"x": x, "y": x.sum(), "v": torch.tensor(float(i)), "id": f"s{i}"}
            i += 1


def test_iterable_dataset_with_max_steps(tmp_path):
    steps = []

    def step(model, batch):
        if torch.is_grad_enabled():
            steps.append(batch["v"].clone())
        return F.mse_loss(model(batch["x"]).squeeze(-1), batch["y"])

    cfg = make_cfg(tmp_path, "train.max_steps=5", "train.log_every=1")
    result = trainwell.fit(
        cfg, model=reg_model(), train_data=Stream(0), val_data=DictDS(8, 1), step_fn=step
    )
    logged = [s for s, _ in csv_values(result.run_dir, "train", "loss")]
    assert logged == [1, 2, 3, 4, 5]
    assert json.loads((result.run_dir / "summary.json").read_text())["status"] == "completed"
    assert steps[-1].shape == (16,)


def test_iterable_dataset_without_max_steps_is_a_user_error(tmp_path):
    model = reg_model()
    init = state_copy(model)
    with pytest.raises(trainwell.UserError) as e:
        trainwell.fit(
            make_cfg(tmp_path),
            model=model,
            train_data=Stream(0),
            val_data=DictDS(8, 1),
            step_fn=lambda m, b: F.mse_loss(m(b["x"]).squeeze(-1), b["y"]),
        )
    assert_one_line(e.value)
    assert "max_steps" in str(e.value)
    assert_not_started(tmp_path / "run", model, init)


@pytest.mark.slow
def test_user_dataloader_is_used_as_is(tmp_path):
    x, y, v = reg_data(64, 0)

    def collate(samples):
        return {
            "x": torch.stack([s[0] for s in samples]),
            "y": torch.stack([s[1] for s in samples]),
            "v": torch.stack([s[2] for s in samples]),
            "marker": "mine",
        }

    loader = DataLoader(TensorDataset(x, y, v), batch_size=5, shuffle=False, collate_fn=collate)
    seen = []

    def step(model, batch):
        if torch.is_grad_enabled():
            seen.append((batch["marker"], batch["v"].tolist()))
        return F.mse_loss(model(batch["x"]).squeeze(-1), batch["y"])

    result = trainwell.fit(
        make_cfg(tmp_path, "train.log_every=1"),
        model=reg_model(),
        train_data=loader,
        val_data=DictDS(8, 1),
        step_fn=step,
    )
    # each epoch: the loader's own 13 batches of 5 (the last one short), in its order
    expected = [("mine", [float(i) for i in range(a, min(a + 5, 64))]) for a in range(0, 64, 5)]
    assert seen[-13:] == expected
    assert seen[-26:-13] == expected
    # 13 batches an epoch, 2 epochs
    assert [s for s, _ in csv_values(result.run_dir, "train", "loss")][-1] == 26


@pytest.mark.slow
def test_collate_by_import_path_for_variable_length_samples(tmp_path, monkeypatch):
    write_module(
        tmp_path,
        monkeypatch,
        "tw_collate_a",
        """
        import torch
        def pad(samples):
            n = max(len(s) for s, _ in samples)
            x = torch.zeros(len(samples), n)
            mask = torch.zeros(len(samples), n)
            for i, (s, _) in enumerate(samples):
                x[i, :len(s)] = s
                mask[i, :len(s)] = 1
            return {"x": x, "mask": mask, "y": torch.stack([t for _, t in samples]), "padded": True}
    """,
    )

    class VarDS(Dataset):
        def __init__(self, n, seed):
            g = torch.Generator().manual_seed(seed)
            self.items = []
            for i in range(n):
                s = torch.randn(1 + i % 6, generator=g)
                self.items.append((s, s.sum() * 2.0))

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            return self.items[i]

    class TokenNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.tensor(0.1))

        def forward(self, x, mask):
            return (self.w * x * mask).sum(1)

    flags = []

    def step(model, batch):
        flags.append(batch["padded"])
        return F.mse_loss(model(batch["x"], batch["mask"]), batch["y"])

    result = trainwell.fit(
        make_cfg(
            tmp_path,
            "data.collate=tw_collate_a:pad",
            "optim.lr=0.1",
            "optim.weight_decay=0",
            "train.epochs=3",
        ),
        model=TokenNet(),
        train_data=VarDS(64, 0),
        val_data=VarDS(12, 1),
        test_data=VarDS(12, 2),
        step_fn=step,
    )
    assert flags and all(f is True for f in flags)
    assert "val/loss" in result.metrics and "test/loss" in result.metrics
    assert result.model.w.item() > 0.5  # moved from 0.1 towards 2.0


# ----------------------------------------------------------------------------- optim / sched


@pytest.mark.slow
def test_torch_optimizer_by_import_path_with_kwargs(tmp_path):
    cfg = make_cfg(
        tmp_path,
        "optim.name=torch.optim:RMSprop",
        "optim.kwargs.alpha=0.8",
        "optim.kwargs.centered=true",
        "sched.name=constant",
        "optim.lr=0.01",
        "train.log_every=1",
    )
    result = trainwell.fit(
        cfg, model=reg_model(), train_data=DictDS(64, 0), val_data=DictDS(8, 1), step_fn=dict_step
    )
    ckpt = torch.load(result.run_dir / "checkpoints" / "last.pt", weights_only=True)
    groups = find_key(ckpt, "param_groups")
    assert groups, "no optimizer state in last.pt"
    assert all(g["alpha"] == 0.8 and g["centered"] is True for g in groups)
    state = find_key(ckpt, "state")
    assert any("square_avg" in s and "grad_avg" in s for s in state.values())
    lrs = [v for _, v in csv_values(result.run_dir, "train", "lr")]
    assert len(lrs) == 8 and all(v == pytest.approx(0.01) for v in lrs)


@pytest.mark.slow
def test_user_optimizer_and_scheduler_from_a_module(tmp_path, monkeypatch):
    write_module(
        tmp_path,
        monkeypatch,
        "tw_optsched_a",
        """
        import torch
        REC = {"steps": 0, "marker": None, "total_steps": None, "floor": None}
        class CountingSGD(torch.optim.SGD):
            def __init__(self, params, lr=1e-3, marker=None, **kw):
                REC["marker"] = marker
                super().__init__(params, lr=lr, **kw)
            def step(self, closure=None):
                REC["steps"] += 1
                return super().step(closure)
        class LinearDown(torch.optim.lr_scheduler.LambdaLR):
            def __init__(self, optimizer, total_steps, floor=0.0):
                REC["total_steps"] = total_steps
                REC["floor"] = floor
                super().__init__(optimizer, lambda s: max(floor, 1.0 - s / total_steps))
    """,
    )
    import tw_optsched_a as mod

    cfg = make_cfg(
        tmp_path,
        "optim.name=tw_optsched_a:CountingSGD",
        "optim.kwargs.marker=hello",
        "sched.name=tw_optsched_a:LinearDown",
        "sched.kwargs.floor=0.25",
        "optim.lr=0.02",
        "train.log_every=1",
    )
    result = trainwell.fit(
        cfg, model=reg_model(), train_data=DictDS(64, 0), val_data=DictDS(8, 1), step_fn=dict_step
    )
    assert mod.REC["marker"] == "hello"
    assert mod.REC["steps"] == 8  # 64 / 16 x 2 epochs
    assert mod.REC["total_steps"] == 8
    assert mod.REC["floor"] == 0.25
    lrs = [v for _, v in csv_values(result.run_dir, "train", "lr")]
    assert len(lrs) == 8
    # the lr of each step, or the one after it (the lr the next step uses)
    used = [0.02 * max(0.25, 1 - s / 8) for s in range(8)]
    after = [0.02 * max(0.25, 1 - s / 8) for s in range(1, 9)]
    assert lrs == pytest.approx(used) or lrs == pytest.approx(after), lrs


def test_onecycle_scheduler_by_import_path_gets_total_steps(tmp_path):
    cfg = make_cfg(
        tmp_path,
        "optim.name=torch.optim:SGD",
        "optim.kwargs.momentum=0.9",
        "sched.name=torch.optim.lr_scheduler:OneCycleLR",
        "sched.kwargs.max_lr=0.05",
        "train.log_every=1",
        "train.epochs=3",
    )
    result = trainwell.fit(
        cfg, model=reg_model(), train_data=DictDS(64, 0), val_data=DictDS(8, 1), step_fn=dict_step
    )
    lrs = [v for _, v in csv_values(result.run_dir, "train", "lr")]
    assert len(lrs) == 12
    # one cycle over exactly the run's 12 steps: up to max_lr, then down to ~0 at the end
    assert max(lrs) == pytest.approx(0.05, rel=0.05)
    assert lrs[-1] < 0.05 / 25
    assert lrs.index(max(lrs)) in (2, 3, 4)
    assert json.loads((result.run_dir / "summary.json").read_text())["status"] == "completed"


# ----------------------------------------------------------------------------- reproducibility


class DropMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


def _repro_run(tmp_path, name, seed=0):
    torch.manual_seed(123)  # same initial weights every time
    model = DropMLP()
    torch.manual_seed(999 + len(name))  # the engine's seeding must not depend on global state
    cfg = make_cfg(tmp_path, f"run.seed={seed}", "train.log_every=1", name=name)

    def step(model, batch):
        out = dict_step(model, batch)
        out["noise"] = torch.rand(()) if model.training else torch.tensor(0.0)
        return out

    return trainwell.fit(
        cfg,
        model=model,
        train_data=DictDS(64, 0),
        val_data=DictDS(16, 1),
        test_data=DictDS(8, 2),
        step_fn=step,
    )


@pytest.mark.slow
def test_same_config_twice_is_bit_identical(tmp_path):
    a = _repro_run(tmp_path, "a")
    b = _repro_run(tmp_path, "bb")
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    assert a.metrics == b.metrics
    assert read_metrics_csv(a.run_dir) == read_metrics_csv(b.run_dir)
    c = _repro_run(tmp_path, "c", seed=1)
    assert any(not torch.equal(sa[k], c.model.state_dict()[k]) for k in sa)


@pytest.mark.slow
@pytest.mark.parametrize("source", ["user_dataloader", "iterable"])
def test_same_config_twice_is_bit_identical_for_other_data_sources(tmp_path, source):
    def run(name):
        torch.manual_seed(5)
        model = DropMLP()
        if source == "user_dataloader":
            x, y, v = reg_data(64, 0)
            data = DataLoader(
                TensorDataset(x, y, v),
                batch_size=8,
                shuffle=True,
                collate_fn=lambda s: {
                    "x": torch.stack([t[0] for t in s]),
                    "y": torch.stack([t[1] for t in s]),
                },
            )
            extra = []
        else:
            data, extra = Stream(3), ["train.max_steps=6"]
        torch.manual_seed(len(name) * 17)  # global RNG state differs between the two runs
        cfg = make_cfg(tmp_path, "train.log_every=1", *extra, name=name)
        return trainwell.fit(
            cfg, model=model, train_data=data, val_data=DictDS(8, 1), step_fn=dict_step
        )

    a, b = run("a"), run("bbb")
    for k, v in a.model.state_dict().items():
        assert torch.equal(v, b.model.state_dict()[k]), k
    assert a.metrics == b.metrics
    assert read_metrics_csv(a.run_dir) == read_metrics_csv(b.run_dir)


@pytest.mark.slow
def test_returned_model_holds_the_best_checkpoint(tmp_path):
    r = _repro_run(tmp_path, "a")
    sd = r.model.state_dict()
    best = torch.load(r.run_dir / "checkpoints" / "best.pt", weights_only=True)
    weights = find_state_dict(best, set(sd))
    assert weights is not None, "no model weights in best.pt"
    for k in sd:
        assert torch.equal(sd[k], weights[k]), k


# ----------------------------------------------------------------------------- bad input


BAD_STEPS = {
    "none": (lambda model, batch: None, ["none"]),
    "float": (lambda model, batch: 0.5, ["float"]),
    "string": (lambda model, batch: "loss", ["str"]),
    "no_loss_key": (lambda model, batch: {"mse": dict_step(model, batch)["loss"]}, ["loss"]),
    "vector_loss": (
        lambda model, batch: (model(batch["x"]).squeeze(-1) - batch["y"]) ** 2,
        ["loss", "scalar"],
    ),
    "vector_loss_in_mapping": (
        lambda model, batch: {"loss": (model(batch["x"]).squeeze(-1) - batch["y"]) ** 2},
        ["loss", "scalar"],
    ),
    "vector_metric": (
        lambda model, batch: {**dict_step(model, batch), "per_item": batch["v"] * 1.0},
        ["per_item"],
    ),
    "float_metric": (lambda model, batch: {**dict_step(model, batch), "ratio": 0.5}, ["ratio"]),
    "none_loss_in_mapping": (lambda model, batch: {"loss": None}, ["loss"]),
    "float_loss_in_mapping": (lambda model, batch: {"loss": 0.5}, ["loss"]),
    "string_loss_in_mapping": (
        lambda model, batch: {"loss": "x", "mae": torch.tensor(1.0)},
        ["loss"],
    ),
    "string_metric": (lambda model, batch: {**dict_step(model, batch), "note": "hi"}, ["note"]),
}


@pytest.mark.parametrize("case", list(BAD_STEPS))
def test_bad_step_output_is_a_user_error_before_training(tmp_path, case):
    fn, words = BAD_STEPS[case]
    calls = []

    def step(model, batch):
        calls.append(torch.is_grad_enabled())
        return fn(model, batch)

    model = reg_model()
    init = state_copy(model)
    with pytest.raises(trainwell.UserError) as e:
        trainwell.fit(
            make_cfg(tmp_path, "train.log_every=50"),
            model=model,
            train_data=DictDS(64, 0),
            val_data=DictDS(8, 1),
            step_fn=step,
        )
    assert isinstance(e.value, ValueError)
    assert_one_line(e.value)
    msg = str(e.value).lower()
    for w in words:
        assert w.lower() in msg, f"{w!r} not in {str(e.value)!r}"
    assert len(calls) <= 2, f"the step ran {len(calls)} times before the error"
    assert_not_started(tmp_path / "run", model, init)


@pytest.mark.parametrize("case", ["none", "no_loss_key", "vector_metric"])
def test_bad_eval_step_output_is_a_user_error(tmp_path, case):
    fn, words = BAD_STEPS[case]
    model = reg_model()
    with pytest.raises(trainwell.UserError) as e:
        trainwell.fit(
            make_cfg(tmp_path),
            model=model,
            train_data=DictDS(64, 0),
            val_data=DictDS(8, 1),
            step_fn=dict_step,
            eval_step_fn=fn,
        )
    assert_one_line(e.value)
    for w in words:
        assert w.lower() in str(e.value).lower()
    summary = tmp_path / "run" / "summary.json"
    if summary.exists():
        assert json.loads(summary.read_text())["status"] != "completed"


@pytest.mark.parametrize("how", ["config", "loss_fn"])
def test_regression_broadcast_is_a_user_error(tmp_path, how):
    x, y, _ = reg_data(64, 0)  # targets (N,), outputs (N, 1)
    xv, yv, _ = reg_data(8, 1)
    model = reg_model()
    init = state_copy(model)
    kw = {"loss_fn": nn.MSELoss()} if how == "loss_fn" else {}
    extra = ["train.loss=mse"] if how == "config" else []
    with pytest.raises(trainwell.UserError) as e:
        trainwell.fit(
            make_cfg(tmp_path, *extra),
            model=model,
            train_data=TensorDataset(x, y),
            val_data=TensorDataset(xv, yv),
            **kw,
        )
    assert_one_line(e.value)
    msg = str(e.value).lower()
    assert "broadcast" in msg or "shape" in msg
    assert "1)" in msg and ",)" in msg  # the shapes, (N, 1) against (N,)
    assert_not_started(tmp_path / "run", model, init)


# The shapes are named with the batch dimension as N (the dry step's probe is 2 samples,
# the run's batches 16): "(N, 1) but the targets are (N,)".
def test_regression_broadcast_error_names_the_batch_shapes(tmp_path):
    x, y, _ = reg_data(64, 0)
    with pytest.raises(trainwell.UserError) as e:
        trainwell.fit(
            make_cfg(tmp_path, "train.loss=mse"),
            model=reg_model(),
            train_data=TensorDataset(x, y),
            val_data=TensorDataset(x[:8], y[:8]),
        )
    assert "(N, 1)" in str(e.value) and "(N,)" in str(e.value), str(e.value)


BAD_PATHS = {
    "train.step": "tw_no_such_module_xyz:step",
    "train.eval_step": "tw_no_such_module_xyz:eval_step",
    "data.collate": "tw_no_such_module_xyz:collate",
    "optim.name": "torch.optim:NoSuchOptimizer",
    "sched.name": "torch.optim.lr_scheduler:NoSuchScheduler",
    "train.loss": "torch.nn:NoSuchLoss",
}


@pytest.mark.parametrize("key", list(BAD_PATHS))
def test_unresolvable_import_path_is_a_user_error(tmp_path, key):
    path = BAD_PATHS[key]
    x, y = cls_data(32, 0)
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    init = state_copy(model)
    calls = []

    def loss_fn(out, target):
        calls.append(1)
        return F.cross_entropy(out, target)

    kw = {} if key == "train.loss" else {"loss_fn": loss_fn}
    with pytest.raises(trainwell.UserError) as e:
        cfg = make_cfg(tmp_path, f"{key}={path}")
        trainwell.fit(
            cfg,
            model=model,
            train_data=TensorDataset(x, y),
            val_data=TensorDataset(*cls_data(8, 1)),
            **kw,
        )
    assert_one_line(e.value)
    name = path.split(":")[0] if "no_such_module" in path else path.split(":")[1]
    assert name in str(e.value), str(e.value)
    assert not calls
    assert_not_started(tmp_path / "run", model, init)


@pytest.mark.parametrize("value", ["16", "vector"])
def test_bad_batch_size_value_is_a_user_error(tmp_path, value):
    def step(model, batch):
        out = dict_step(model, batch)
        out["batch_size"] = value if value == "16" else batch["v"]
        return out

    model = reg_model()
    init = state_copy(model)
    with pytest.raises(trainwell.UserError) as e:
        trainwell.fit(
            make_cfg(tmp_path),
            model=model,
            train_data=DictDS(64, 0),
            val_data=DictDS(8, 1),
            step_fn=step,
        )
    assert_one_line(e.value)
    assert "batch_size" in str(e.value)
    assert_not_started(tmp_path / "run", model, init)


@dataclasses.dataclass
class PointSample:
    x: torch.Tensor
    y: torch.Tensor
    name: str


class PointDS(Dataset):
    def __init__(self, n, seed):
        self.x, self.y, _ = reg_data(n, seed)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return PointSample(self.x[i], self.y[i], f"p{i}")


# Was a bug: a Dataset whose samples are dataclasses (the contract lists dataclasses among
# batch structures) fails inside torch's default_collate with a raw TypeError: neither
# collated field by field nor a one-line UserError.
@pytest.mark.slow
def test_dataclass_samples_with_the_engines_loader(tmp_path):
    seen = []

    def step(model, batch):
        if model.training:
            seen.append(batch)
        return F.mse_loss(model(batch.x).squeeze(-1), batch.y)

    try:
        result = trainwell.fit(
            make_cfg(tmp_path, "train.epochs=1"),
            model=reg_model(),
            train_data=PointDS(32, 0),
            val_data=PointDS(8, 1),
            step_fn=step,
        )
    except trainwell.UserError as e:  # acceptable: a clear refusal
        assert_one_line(e)
        assert "PointSample" in str(e) or "collate" in str(e)
        return
    assert type(seen[-1]) is PointSample and seen[-1].x.shape == (16, 4)
    assert math.isfinite(result.metrics["val/loss"])


NONCALLABLE_OK = ["train.step", "optim.name", "sched.name"]
NONCALLABLE_BAD = ["train.loss", "data.collate"]


def _noncallable_path(tmp_path, key):
    x, y = cls_data(32, 0)
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    init = state_copy(model)
    with pytest.raises(trainwell.UserError) as e:
        trainwell.fit(
            make_cfg(tmp_path, f"{key}=math:pi"),
            model=model,
            train_data=TensorDataset(x, y),
            val_data=TensorDataset(*cls_data(8, 1)),
        )
    assert_one_line(e.value)
    assert key in str(e.value) or "math:pi" in str(e.value), str(e.value)
    assert_not_started(tmp_path / "run", model, init)


@pytest.mark.parametrize("key", NONCALLABLE_OK)
def test_import_path_to_a_non_callable_is_a_user_error(tmp_path, key):
    _noncallable_path(tmp_path, key)


# Was a bug: train.loss=math:pi and data.collate=math:pi resolve to a float: the engine
# raises a raw TypeError "'float' object is not callable" (for train.loss only after the
# run directory was made) where train.step=math:pi gives a clear UserError. Ambiguous only
# in that the contract says "does not resolve"; it resolves, to something unusable.
@pytest.mark.parametrize("key", NONCALLABLE_BAD)
def test_import_path_to_a_non_callable_loss_or_collate_is_a_user_error(tmp_path, key):
    _noncallable_path(tmp_path, key)


# Was a bug: optim.kwargs the built-in optimizer refuses raise a raw TypeError
# ("AdamW.__init__() got an unexpected keyword argument 'bogus'"), while the same mistake
# with an import-path optimizer, a scheduler or train.loss_kwargs is a one-line UserError.
def test_bad_kwargs_for_the_builtin_optimizer_is_a_user_error(tmp_path):
    model = reg_model()
    init = state_copy(model)
    with pytest.raises(trainwell.UserError) as e:
        trainwell.fit(
            make_cfg(tmp_path, "optim.kwargs.bogus=1"),
            model=model,
            train_data=DictDS(64, 0),
            val_data=DictDS(8, 1),
            step_fn=dict_step,
        )
    assert_one_line(e.value)
    assert "bogus" in str(e.value)
    assert_not_started(tmp_path / "run", model, init)


@pytest.mark.parametrize(
    "extra,word",
    [
        (["optim.name=torch.optim:RMSprop", "optim.kwargs.bogus=1"], "bogus"),
        (["sched.name=torch.optim.lr_scheduler:StepLR", "sched.kwargs.gamma=0.5"], "step_size"),
        (["train.loss_kwargs.bogus=1"], "bogus"),
    ],
)
def test_arguments_an_import_path_refuses_are_a_user_error(tmp_path, extra, word):
    x, y = cls_data(32, 0)
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    init = state_copy(model)
    with pytest.raises(trainwell.UserError) as e:
        trainwell.fit(
            make_cfg(tmp_path, *extra),
            model=model,
            train_data=TensorDataset(x, y),
            val_data=TensorDataset(*cls_data(8, 1)),
        )
    assert_one_line(e.value)
    assert word in str(e.value)
    assert_not_started(tmp_path / "run", model, init)


def test_user_error_is_a_value_error():
    assert issubclass(trainwell.UserError, ValueError)


# ----------------------------------------------------------------------------- CLI

CLI_STEPS = """
import torch
import torch.nn.functional as F

def ok(model, batch):
    x, y = batch
    out = model(x)
    return {"loss": F.cross_entropy(out, y), "hits": (out.argmax(1) == y).float().mean()}

def returns_none(model, batch):
    return None

def no_loss(model, batch):
    x, y = batch
    return {"ce": F.cross_entropy(model(x), y)}
"""

CLI_BASE = [
    "data.name=synthetic",
    "data.kwargs.num_samples=128",
    "data.kwargs.shape=[8]",
    "data.kwargs.num_classes=4",
    "data.batch_size=32",
    "model.name=mlp",
    "model.kwargs.hidden=[16]",
    "train.epochs=1",
    "train.precision=fp32",
    "doctor.enabled=false",
]


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "tw_cli_steps.py").write_text(CLI_STEPS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}
    exe = [str(TRAINWELL_BIN)] if TRAINWELL_BIN.exists() else [sys.executable, "-m", "trainwell"]
    return subprocess.run(
        [*exe, "train", *CLI_BASE, f"run.dir={tmp_path / 'run'}", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_cli_step_by_import_path_trains(tmp_path):
    p = run_cli(tmp_path, "train.step=tw_cli_steps:ok")
    assert p.returncode == 0, p.stderr
    rows = read_metrics_csv(tmp_path / "run")
    assert [r for r in rows if r["split"] == "val" and r["name"] == "hits"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed"


@pytest.mark.slow
@pytest.mark.parametrize(
    "arg,word,real",
    [
        ("train.step=tw_cli_steps:returns_none", "none", False),
        ("train.step=tw_cli_steps:no_loss", "loss", False),
        # A module missing from the real process's path: that one launches the console
        # script; the others run the same CLI in-process (the error path is the same).
        ("train.step=tw_cli_missing_mod:step", "tw_cli_missing_mod", True),
        ("optim.name=torch.optim:NoSuchOptimizer", "NoSuchOptimizer", False),
    ],
)
def test_cli_bad_step_exits_2_with_one_line(tmp_path, request, arg, word, real):
    if real:
        p = run_cli(tmp_path, arg)
        code, stderr = p.returncode, p.stderr
    else:
        (tmp_path / "tw_cli_steps.py").write_text(CLI_STEPS)
        cli = request.getfixturevalue("cli")
        code, _, stderr = cli("train", *CLI_BASE, f"run.dir={tmp_path / 'run'}", arg)
    assert code == 2, (code, stderr[-2000:])
    assert "Traceback" not in stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    err = [ln for ln in lines if ln.startswith("trainwell: error: ")]
    assert len(err) == 1, stderr
    assert word.lower() in err[0].lower(), err[0]
    summary = tmp_path / "run" / "summary.json"
    if summary.exists():
        assert json.loads(summary.read_text())["status"] not in ("completed", "running")
