"""A damaged shard in a sharded (DCP) checkpoint folder is skipped like a torn ``.pt``
file, with what is wrong with it, and ``--resume auto`` continues from the newest whole
folder; a shard that cannot be *read* stops the run instead. The checkpoints come from a
real 2-process FSDP run (torchrun, gloo); one resume runs on 2 processes too."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests import io_faults
from tests.conftest import REPO, SYNTHETIC, read_summary
from trainwell.cli import main
from trainwell.engine.checkpointing import shard_check, sharded
from trainwell.engine.checkpointing.checkpoint import Unreadable

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not built in"
)


RUN = [*SYNTHETIC, "model.kwargs.dropout=0.0", "train.precision=fp32", "train.epochs=2",
       "checkpoint.every_steps=5", "checkpoint.keep_last=100", "dist.strategy=fsdp"]  # fmt: skip
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def launch(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainwell", "train", *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=240)  # fmt: skip


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory) -> Path:
    """A finished 2-process FSDP run: last/, best/ (step 28), step-5/ ... step-25/."""
    root = tmp_path_factory.mktemp("shards")
    proc = launch(root, "--nproc", "2", *RUN, f"run.dir={root / 'run'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run"


@pytest.fixture
def run(two_process_run, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(two_process_run, copy)
    return copy


def cli(cwd: Path, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def garbage(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))  # same size: only the bytes are wrong


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


DAMAGE = {
    "garbage shard 0": (lambda f: garbage(f / "__0_0.distcp"), "shard __0_0.distcp is not what"),
    "short garbage": (lambda f: (f / "__0_0.distcp").write_bytes(b"x" * 100), "is cut short"),
    "truncated shard 1": (lambda f: truncate(f / "__1_0.distcp"), "__1_0.distcp is cut short"),
    "zeroed shard 1": (lambda f: (f / "__1_0.distcp").write_bytes(
        b"\0" * (f / "__1_0.distcp").stat().st_size), "shard __1_0.distcp is not what"),
    "missing metadata": (lambda f: (f / ".metadata").unlink(), "(.metadata) is missing"),
    "garbage metadata": (lambda f: garbage(f / ".metadata"), "(.metadata) is unreadable"),
    "missing shard": (lambda f: (f / "__1_0.distcp").unlink(), "missing shard files (__1_0"),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_resume_auto_skips_a_damaged_folder_for_the_newest_whole_one(run, tmp_path, damage):
    spoil, diagnosis = DAMAGE[damage]
    spoil(run / "checkpoints" / "last")
    code, out, err = cli(tmp_path, "train", *RUN, "train.epochs=3", f"run.dir={run}",
                         "--resume", "auto")  # fmt: skip
    assert code == 0, err
    skipped = [line for line in out.splitlines() if line.startswith("skipping unusable")]
    assert len(skipped) == 1 and f"checkpoint {run / 'checkpoints' / 'last'} is " in skipped[0]
    assert diagnosis in skipped[0] and "does not fit this model" not in out
    assert f"resuming from {run / 'checkpoints' / 'best'} at step 28" in out
    assert read_summary(run)["status"] == "completed" and read_summary(run)["steps"] == 42


@pytest.mark.slow
def test_last_and_best_damaged_resumes_from_the_newest_step_folder(run, tmp_path):
    garbage(run / "checkpoints" / "last" / "__0_0.distcp")
    truncate(run / "checkpoints" / "best" / "__1_0.distcp")
    code, out, err = cli(tmp_path, "train", *RUN, "train.epochs=3", f"run.dir={run}",
                         "--resume", "auto")  # fmt: skip
    assert code == 0, err
    assert out.count("skipping unusable checkpoint") == 2
    assert f"resuming from {run / 'checkpoints' / 'step-25'} at step 25" in out
    assert read_summary(run)["steps"] == 42


@pytest.mark.slow
def test_resuming_a_damaged_folder_by_name_says_damaged_not_another_model(run, tmp_path):
    last = run / "checkpoints" / "last"
    garbage(last / "__0_0.distcp")
    code, out, err = cli(tmp_path, "train", *RUN, "train.epochs=3", f"run.dir={tmp_path / 'b'}",
                         "--resume", str(last))  # fmt: skip
    assert code == 2
    line = err.strip()
    assert len(line.splitlines()) == 1 and f"checkpoint {last} is damaged" in line
    assert "does not fit" not in line and not (tmp_path / "b").exists()


@pytest.mark.slow
def test_a_whole_folder_passes_and_another_checkpoints_shard_is_still_a_loadable_shard(run):
    for name in ("last", "best", "step-5", "step-25"):
        shard_check.check_shards(run / "checkpoints" / name)  # no error
    # A shard of the same model at another step has the same layout: nothing in the
    # folder can tell it apart, so it is not refused (DCP would load it as well).
    shutil.copy(run / "checkpoints" / "step-5" / "__0_0.distcp", run / "checkpoints" / "last")
    shard_check.check_shards(run / "checkpoints" / "last")


@pytest.mark.slow
def test_an_unreadable_shard_stops_resume_auto_with_one_line(run, tmp_path, monkeypatch):
    import builtins

    for module, name in [(builtins, "open"), (io, "open"), (os, "open"), (os, "stat")]:
        monkeypatch.setattr(module, name, getattr(module, name))
    for name in ("listdir", "scandir", "mkdir", "unlink", "remove", "rmdir", "rename", "replace"):
        monkeypatch.setattr(os, name, getattr(os, name))
    shard = run / "checkpoints" / "last" / "__1_0.distcp"
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    io_faults.install([{"path": str(shard), "kind": "deny-file"}])
    with pytest.raises(Unreadable) as caught:
        sharded.load_state(run / "checkpoints" / "last")
    assert f"cannot read checkpoint {shard}: [Errno 13]" in str(caught.value)
    code, out, err = cli(tmp_path, "train", *RUN, "train.epochs=3", f"run.dir={run}",
                         "--resume", "auto")  # fmt: skip
    assert code == 2 and "skipping" not in out and "resuming" not in out
    assert f"cannot read checkpoint {shard}: [Errno 13] Permission denied" in err
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before


@pytest.mark.slow
def test_two_processes_resume_past_a_garbage_shard(run, tmp_path):
    """The issue's case: a --max-restarts job must come back over a damaged last/."""
    garbage(run / "checkpoints" / "last" / "__0_0.distcp")
    proc = launch(tmp_path, "--nproc", "2", *RUN, "train.epochs=3", f"run.dir={run}",
                  "--resume", "auto")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "is damaged: shard __0_0.distcp" in proc.stdout
    assert "at step 28" in proc.stdout and "does not fit" not in proc.stdout + proc.stderr
    assert read_summary(run)["steps"] == 42 and read_summary(run)["world_size"] == 2
