"""Sharded checkpoints on one process (dist.strategy=fsdp runs unsharded there, but writes
the same DCP folders): torn and damaged folders, models that do not fit, consolidation,
rotation, and the bad input FSDP refuses before any collective."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.conftest import SYNTHETIC, read_summary
from trainwell.cli import main
from trainwell.engine.checkpointing import sharded
from trainwell.engine.checkpointing.checkpoint import load_checkpoint, rotate
from trainwell.engine.checkpointing.resume import candidates, remove_stale_temporaries
from trainwell.engine.distributed.fsdp import shard
from trainwell.errors import UserError

RUN = [*SYNTHETIC, "model.kwargs.dropout=0.0", "train.precision=fp32", "train.epochs=2",
       "checkpoint.every_steps=5", "dist.strategy=fsdp"]  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A finished 1-process fsdp run (28 steps), copied by each test that damages it."""
    root = tmp_path_factory.mktemp("sharded")
    code, out, err = _cli(root, "train", *RUN, f"run.dir={root / 'run'}")
    assert code == 0, err
    assert "dist.strategy=fsdp on one process: nothing to shard" in out
    return root / "run"


def _cli(cwd: Path, *args: str) -> tuple[int, str, str]:
    """``trainwell ARGS`` in this process (one-process runs: no launcher to start)."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    return copy


@pytest.mark.slow
def test_folders_hold_shards_state_and_marker(run_dir):
    names = {p.name for p in (run_dir / "checkpoints").iterdir()}
    assert {"last", "best", "step-15", "step-20", "step-25"} == names  # keep_last 3
    assert not any(name.endswith(".pt") for name in names)
    state = sharded.load_state(run_dir / "checkpoints" / "last")
    assert state["step"] == 28 and state["sharded"] is True
    # state.pt alone is weights-only loadable, and holds no weights.
    raw = torch.load(run_dir / "checkpoints" / "last" / "state.pt", weights_only=True)
    assert raw["model"] == {} and raw["config"]["dist"]["strategy"] == "fsdp"


@pytest.mark.slow
def test_resume_auto_skips_a_torn_folder_with_a_message(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path)
    (run / "checkpoints" / "last" / sharded.MARKER).unlink()
    (run / "checkpoints" / "best" / sharded.MARKER).unlink()
    code, out, err = _cli(tmp_path, "train", *RUN, "train.epochs=3", f"run.dir={run}",
                          "--resume", "auto")  # fmt: skip
    assert code == 0, err
    assert "is torn: it has no commit marker" in out
    assert "resuming from" in out and "step-25" in out
    assert read_summary(run)["steps"] == 42


@pytest.mark.slow
def test_a_missing_shard_is_one_line_and_nothing_is_lost(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path)
    last = run / "checkpoints" / "last"
    (last / "__0_0.distcp").unlink()
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    code, out, err = _cli(tmp_path, "train", *RUN, f"run.dir={run}", "--resume", str(last))
    assert code == 2
    assert "is missing shard files (__0_0.distcp)" in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before
    # --resume auto goes past it, to the newest whole one.
    assert sharded.missing_shards(last) == ["__0_0.distcp"]


@pytest.mark.slow
def test_a_checkpoint_of_another_model_does_not_fit(run_dir, tmp_path):
    last = run_dir / "checkpoints" / "last"
    other = [*RUN, "model.kwargs.hidden=[16]", f"run.dir={tmp_path / 'other'}"]
    code, _, err = _cli(tmp_path, "train", *other, "--resume", str(last))
    assert code == 2
    assert f"checkpoint {last} does not fit this model" in err


@pytest.mark.slow
def test_export_consolidates_into_one_resumable_file(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path)
    code, out, err = _cli(tmp_path, "export", str(run), "--format", "pt")
    assert code == 0, err
    written = run / "checkpoints" / "best.consolidated.pt"
    assert f"wrote {written}" in out
    state = load_checkpoint(written)
    whole = sharded.consolidate(run / "checkpoints" / "best")
    assert state["model"].keys() == whole["model"].keys()
    assert all(torch.equal(state["model"][k], whole["model"][k]) for k in state["model"])
    assert isinstance(state["optimizer"]["param_groups"][0]["params"][0], str)
    # Not a name --resume auto takes, and it resumes as a ddp run from its path.
    assert written not in candidates(run)
    code, out, err = _cli(tmp_path, "train", *RUN[:-1], "train.epochs=3",
                          f"run.dir={tmp_path / 'ddp'}", "--resume", str(written))  # fmt: skip
    assert code == 0, err
    assert read_summary(tmp_path / "ddp")["steps"] == 42
    code, out, err = _cli(tmp_path, "export", str(run), "--format", "safetensors")
    assert code == 0 and "read back and identical" in out, err


def test_rotation_and_stale_folders(tmp_path):
    folder = tmp_path / "checkpoints"
    for step in (5, 10, 15):
        (folder / f"step-{step}").mkdir(parents=True)
    rotate(folder, keep_last=2)
    assert sorted(p.name for p in folder.iterdir()) == ["step-10", "step-15"]
    # A committed .last.tmp (killed between the two renames) is newer than nothing else:
    # resume takes it; an uncommitted one is torn and goes at the next start.
    committed = folder / ".last.tmp"
    committed.mkdir()
    time.sleep(0.01)
    (committed / sharded.MARKER).write_text("committed\n")
    torn = folder / ".best.tmp"
    torn.mkdir()
    assert candidates(tmp_path)[0] == committed
    remove_stale_temporaries(tmp_path)
    assert committed.exists() and not torn.exists()
    (folder / "last").mkdir()
    remove_stale_temporaries(tmp_path)  # last/ is there: the temporary one is stale
    assert not committed.exists()


def test_shard_refuses_fp16_and_unknown_blocks_before_any_collective():
    model = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 2))
    cpu = torch.device("cpu")
    with pytest.raises(UserError, match="train.precision=fp16 with dist.strategy=fsdp"):
        shard(model, 2, cpu, modules=[], precision="fp16")
    with pytest.raises(UserError, match="dist.fsdp_modules: the model has no module 'head'"):
        shard(model, 2, cpu, modules=["head"], precision="fp32")


def test_config_names_the_strategies(tmp_path):
    code, _, err = _cli(tmp_path, "train", "dist.strategy=zero3", "--dry-run")
    assert code == 2 and "dist.strategy: expected one of ddp, fsdp; got 'zero3'" in err
    code, _, err = _cli(tmp_path, "train", *RUN, "dist.fsdp_modules=[nope]", "--dry-run")
    assert code == 2 and "dist.fsdp_modules: the model has no module 'nope'" in err


def test_a_model_without_blocks_is_sharded_at_the_root_and_says_so(tmp_path):
    import torch.distributed as dist

    class Flat(nn.Module):  # no ModuleList, no Sequential
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

        def forward(self, x):
            return self.b(self.a(x).relu())

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)  # fmt: skip
    try:
        lines: list[str] = []
        model = Flat()
        assert shard(model, 1, torch.device("cpu"), modules=[], precision="fp32",
                     say=lines.append) == []  # fmt: skip
        assert "sharding the root module only" in lines[0]
        assert type(model.a.weight).__name__ == "DTensor"
        model(torch.ones(3, 4)).sum().backward()  # it trains
        assert model.a.weight.grad is not None
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_a_full_disk_during_a_sharded_write_is_one_line_and_keeps_the_last_one(
    run_dir, tmp_path, monkeypatch
):
    import errno

    import torch.distributed.checkpoint.filesystem as dcp_files

    run = _copy(run_dir, tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in (run / "checkpoints" / "last").iterdir()}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dcp_files, "_write_item", full)
    code, out, err = _cli(tmp_path, "train", *RUN, "train.epochs=3", f"run.dir={run}",
                          "--resume", "auto")  # fmt: skip
    assert code == 2
    assert "could not write checkpoint" in err and "No space left on device" in err
    assert len(err.strip().splitlines()) == 1
    # The committed last/ is untouched, no temporary folder is left, the run says failed.
    after = {p.name: p.stat().st_mtime_ns for p in (run / "checkpoints" / "last").iterdir()}
    assert after == before
    assert not list((run / "checkpoints").glob(".*.tmp"))
    assert read_summary(run)["status"] == "failed"
