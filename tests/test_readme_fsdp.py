"""The README's FSDP example runs as written: 2 sharded processes, resumed on one,
consolidated into one file."""

from __future__ import annotations

import shlex

import pytest
import torch

from tests.conftest import read_summary, run_subprocess
from tests.test_readme import block
from trainwell.engine.checkpoint import load_checkpoint


@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_fsdp_example_runs_as_written(tmp_path):
    lines = block("bash", "trainwell train --nproc 2 dist.strategy=fsdp").splitlines()
    outputs = []
    for line in lines:
        args = shlex.split(line)
        assert args[0] == "trainwell"
        proc = run_subprocess(args[1:], tmp_path, timeout=300)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        outputs.append(proc.stdout)
    sharded, resumed, exported = outputs
    assert "sharded over 2 processes" in sharded
    assert "nothing to shard" in resumed and "resuming from" in resumed
    run = tmp_path / "runs" / "sharded"
    assert read_summary(run)["steps"] == 3 * read_summary(run)["steps_per_epoch"]
    written = run / "checkpoints" / "best.consolidated.pt"
    assert "wrote runs/sharded/checkpoints/best.consolidated.pt" in exported
    assert "model" in load_checkpoint(written)
