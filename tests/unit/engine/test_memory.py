"""Memory figures at log points: live CPU tensor bytes counted right, fake tensors skipped
without a warning, the count kept within its time budget, and the rows in metrics.csv."""

from __future__ import annotations

import csv
import warnings

import pytest
import torch

import trainwell
from tests.conftest import SYNTHETIC
from trainwell.engine.loop.memory import MemoryLog, live_tensor_bytes, resident_bytes
from trainwell.engine.loop.progress import make_console


def test_live_tensor_bytes_sees_a_new_tensor_once_even_through_views():
    before = live_tensor_bytes()
    big = torch.zeros(1024, 1024)  # 4 MiB
    views = [big[:10], big.view(-1), big.t()]  # the same storage: counted once
    after = live_tensor_bytes()
    assert 4 * 2**20 <= after - before < 4.5 * 2**20
    del big, views


def test_fake_tensors_are_skipped_without_a_warning():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.zeros(512, 512)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        live_tensor_bytes()
    del fake


def test_the_tensor_walk_keeps_to_its_budget():
    assert "mem/tensor_mb" not in MemoryLog(torch.device("cpu")).sample()  # 10 s first
    log = MemoryLog(torch.device("cpu"), first_walk_s=0)
    first, second = log.sample(), log.sample()
    assert first["mem/rss_mb"] > 10 and "mem/tensor_mb" in first
    assert "mem/rss_mb" in second and "mem/tensor_mb" not in second  # too soon: skipped
    assert resident_bytes() > 0


@pytest.mark.slow
def test_metrics_csv_has_the_machine_rows_at_each_log_point(tmp_path):
    cfg = trainwell.load_config(overrides=[*SYNTHETIC, "train.epochs=2", "train.log_every=4",
                                           f"run.dir={tmp_path / 'run'}"])  # fmt: skip
    result = trainwell.fit(cfg, console=make_console(quiet=True))
    with open(result.run_dir / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["split"] == "train"]
    steps = sorted({int(r["step"]) for r in rows})
    for name in ("loss", "lr", "grad_norm", "samples_per_s", "mem/rss_mb"):
        assert sorted(int(r["step"]) for r in rows if r["name"] == name) == steps, name
    # A run of seconds: walking the live tensors (0.1 s) would cost it more than 1%.
    assert not any(r["name"] == "mem/tensor_mb" for r in rows)
    assert all(float(r["value"]) > 0 for r in rows if r["name"] == "grad_norm")
    assert "train/grad_norm" not in result.metrics  # logged per window, not an epoch metric
