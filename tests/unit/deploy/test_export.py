"""Exporting weights to safetensors, with the read-back parity check."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, safe_open

import trainwell
from trainwell.config import load_config
from trainwell.engine.checkpointing.checkpoint import load_checkpoint

SMALL = [
    "data.name=synthetic",
    "data.kwargs.num_samples=256",
    "data.kwargs.shape=[8]",
    "model.name=mlp",
    "model.kwargs.hidden=[16]",
    "train.epochs=1",
    "data.batch_size=32",
]


def test_export_run_dir_to_safetensors(cli, tmp_path):
    trainwell.fit(load_config(overrides=[*SMALL, f"run.dir={tmp_path / 'run'}"]))
    code, out, err = cli("export", "run", "--format", "safetensors")
    assert code == 0, err
    path = tmp_path / "run" / "checkpoints" / "best.safetensors"
    assert f"wrote {path.relative_to(tmp_path)}" in out
    weights = load_file(str(path))
    best = load_checkpoint(tmp_path / "run" / "checkpoints" / "best.pt")["model"]
    assert weights.keys() == best.keys()
    assert all(torch.equal(weights[k], best[k]) for k in best)
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    assert meta["source"] == "best.pt" and json.loads(meta["config"])["model"]["name"] == "mlp"


@pytest.mark.slow
def test_export_a_checkpoint_with_tied_weights(cli, tmp_path):
    shared = torch.randn(3, 3)
    torch.save({"model": {"a": shared, "b": shared, "c": shared.t()}, "step": 3}, tmp_path / "t.pt")
    code, _, err = cli("export", "t.pt", "--output", "t.safetensors")
    assert code == 0, err
    loaded = load_file(str(tmp_path / "t.safetensors"))
    assert torch.equal(loaded["c"], shared.t())


@pytest.mark.slow
def test_export_bad_sources(cli, tmp_path):
    (tmp_path / "empty_run").mkdir()
    code, _, err = cli("export", "empty_run")
    assert code == 2 and "holds no checkpoints/best.pt" in err
    code, _, err = cli("export", "missing.pt")
    assert code == 2 and "does not exist" in err
    (tmp_path / "junk.pt").write_bytes(b"junk" * 10)
    code, _, err = cli("export", "junk.pt")
    assert code == 2 and "junk.pt" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "junk.safetensors").exists()
