"""The README's FSDP example runs as written: 2 sharded processes, resumed on one,
consolidated into one file."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import read_summary
from tests.docs.test_readme import run_commands
from trainwell.engine.checkpointing.checkpoint import load_checkpoint


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_fsdp_example_runs_as_written(tmp_path):
    first_line = "trainwell train --nproc 2 dist.strategy=fsdp"
    sharded, resumed, exported = run_commands(first_line, tmp_path)
    assert "sharded over 2 processes" in sharded
    assert "nothing to shard" in resumed and "resuming from" in resumed
    run = tmp_path / "runs" / "sharded"
    assert read_summary(run)["steps"] == 3 * read_summary(run)["steps_per_epoch"]
    written = run / "checkpoints" / "best.consolidated.pt"
    assert "wrote runs/sharded/checkpoints/best.consolidated.pt" in exported
    assert "model" in load_checkpoint(written)
