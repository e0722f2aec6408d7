"""train.metrics on 2 processes (torchrun, gloo): the value equals one process's, and a
count sees each sample of the split exactly once, whatever the object's kind (torchmetrics
syncing itself, a plain class with merge, a plain class without)."""

from __future__ import annotations

import csv

import pytest
import torch
from rich.console import Console

import trainwell
from tests.conftest import read_summary
from tests.e2e.test_distributed import trainwell_cmd
from trainwell.config import load_config

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not built in"
)


CODE = "tests.split_metrics_code"
OBJECTS = {"f1": "MacroF1", "f1_merged": "MergingMacroF1", "n": "SampleCount",
           "auroc": "RankAUROC", "c": "Count"}  # fmt: skip
COMMON = [f"model.name={CODE}:mlp", "model.kwargs={}", "train.precision=fp32",
          "doctor.enabled=false", "data.batch_size=32", "data.eval_batch_size=16",
          "model.kwargs={}", "train.log_every=4",
          *(f"train.metrics.{k}.name={CODE}:{v}" for k, v in OBJECTS.items())]  # fmt: skip
if __import__("importlib").util.find_spec("torchmetrics"):
    COMMON.append(f"train.metrics.tm.name={CODE}:TorchCount")


def one_process(tmp_path, args):
    cfg = load_config(overrides=[*COMMON, *args, f"run.dir={tmp_path / 'one'}"])
    return trainwell.fit(cfg, console=Console(quiet=True)).metrics


def two_processes(tmp_path, args):
    proc = trainwell_cmd("train", "--nproc", "2", *COMMON, *args, "run.dir=two", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_summary(tmp_path / "two")


def assert_same(two: dict, one: dict) -> None:
    names = [k for k in one if k.split("/")[0] in ("val", "test")]
    assert sorted(k for k in two if k.split("/")[0] in ("val", "test")) == sorted(names)
    for name in names:
        # The objects see the same predictions (their values are exact); a mean loss
        # differs in the last bits, as the weights of DDP's all-reduce do.
        tight = name.split("/")[1] in (*OBJECTS, "tm")
        assert two[name] == pytest.approx(one[name], rel=1e-12 if tight else 1e-5), name


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_engine_shards_give_one_process_values_on_two(tmp_path, strategy):
    args = [f"data.name={CODE}:splits", "train.epochs=2", "early_stop.monitor=val/f1",
            f"dist.strategy={strategy}"]  # fmt: skip
    summary = two_processes(tmp_path, args)
    one = one_process(tmp_path, args)
    final = summary["final"]
    assert_same(final, one)
    # Each sample once: 101 validation and 37 test samples, by every kind of object.
    assert final["val/n"] == final["val/c/samples"] == 101.0
    assert final["test/n"] == final["test/c/samples"] == 37.0
    if "val/tm" in final:
        assert final["val/tm"] == 101.0 and final["test/tm"] == 37.0
    assert summary["best"]["metric"] == "val/f1"
    # Every evaluation logged the count once, with the exact split size.
    with open(tmp_path / "two" / "metrics.csv", newline="") as f:
        counts = [float(r["value"]) for r in csv.DictReader(f) if r["name"] == "n"]
    assert counts == [101.0, 101.0, 37.0]


@pytest.mark.slow
def test_user_loaders_padded_or_unsharded_count_each_sample_once(tmp_path):
    args = [f"data.name={CODE}:loader_splits", "train.epochs=8", f"callbacks=[{CODE}:RankScore]",
            "early_stop.monitor=val/rank_score", "early_stop.mode=max", "early_stop.patience=2"]
    summary = two_processes(tmp_path, args)
    one = one_process(tmp_path, args)
    final = summary["final"]
    # The DistributedSampler's padded duplicate is cut (101, not 102); the unsharded test
    # loader is evaluated once over the two ranks (37, not 74).
    assert final["val/n"] == final["val/c/samples"] == 101.0
    assert final["test/n"] == 37.0
    if "val/tm" in final:
        assert final["val/tm"] == 101.0 and final["test/tm"] == 37.0
    assert_same(final, one)
    # Rank 0's logged values decide on every rank: best at epoch 2, stopped after epoch 4.
    assert summary["steps"] == 4 * 8 and summary["best"]["value"] == 0.9
    assert summary["best"]["step"] == 16 and "early stop" in summary["stop_reason"]


@pytest.mark.slow
def test_a_bad_monitor_on_two_processes_is_refused_before_any_run_dir(tmp_path):
    proc = trainwell_cmd("train", "--nproc", "2", *COMMON, f"data.name={CODE}:splits",
                         "early_stop.monitor=val/f2", "run.dir=run", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    said = {line for line in proc.stderr.splitlines() if line.startswith("trainwell: error")}
    assert len(said) == 1 and "'val/f2' is not a metric of this run" in said.pop()
    assert not (tmp_path / "run").exists()  # the launcher's folder is taken back
