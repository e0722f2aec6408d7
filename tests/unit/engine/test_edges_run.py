"""Nothing lost at the edges of a run: the last step, a held run directory, a torn last.pt,
foreign and crafted checkpoints, failed writes, signals outside the loop, divergence."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console
from torch import nn
from torch.utils.data import Dataset, TensorDataset

import trainwell
from tests.conftest import REPO, SYNTHETIC, model_csv, read_summary
from trainwell.config import load_config
from trainwell.engine.checkpointing import checkpoint as ckpt
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.engine.run.run_files import mark_failed, resume_command
from trainwell.engine.run_dir.run_lock import RunLock
from trainwell.errors import Diverged, UserError

QUIET = Console(quiet=True)
BASE = [*SYNTHETIC, "train.precision=fp32", "train.log_every=3", "checkpoint.keep_last=100"]


def fit(run_dir: Path, *overrides: str, **kw):
    cfg = load_config(overrides=[*BASE, f"run.dir={run_dir}", *overrides])
    return trainwell.fit(cfg, console=QUIET, **kw)


def files_of(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_checkpoint_at_the_last_step_resumes_to_the_same_end(tmp_path):
    args = ["train.max_steps=12", "checkpoint.every_steps=12", "train.epochs=3"]
    fit(tmp_path / "ref", *args)
    # The run as a SIGKILL right after step-12.pt leaves it: no end-of-epoch work yet.
    run = tmp_path / "run"
    shutil.copytree(tmp_path / "ref", run)
    state = load_checkpoint(run / "checkpoints" / "step-12.pt")
    for name in ("last.pt", "best.pt"):
        (run / "checkpoints" / name).unlink()
    lines = (run / "metrics.csv").read_text().splitlines(keepends=True)
    (run / "metrics.csv").write_text("".join(lines[: 1 + state["log_rows"]]))
    again = fit(run, *args, resume="auto")
    ref = tmp_path / "ref"
    assert model_csv(run / "metrics.csv") == model_csv(ref / "metrics.csv")
    for name in ("last.pt", "best.pt"):
        a = load_checkpoint(run / "checkpoints" / name)
        b = load_checkpoint(ref / "checkpoints" / name)
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"]), name
        assert a["best"] == b["best"] and a["step"] == b["step"] == 12
    assert again.metrics == read_summary(ref)["final"]


@pytest.mark.slow
def test_a_foreign_checkpoint_never_overwrites_a_completed_run(tmp_path):
    fit(tmp_path / "a", "train.epochs=1", "checkpoint.every_steps=5")
    fit(tmp_path / "b", "train.epochs=1")
    before = files_of(tmp_path / "b")
    with pytest.raises(UserError, match="holds another run"):
        fit(tmp_path / "b", "train.epochs=2", resume=tmp_path / "a/checkpoints/step-5.pt")
    assert files_of(tmp_path / "b") == before
    # Into a fresh folder it is fine.
    fit(tmp_path / "c", "train.epochs=2", resume=tmp_path / "a" / "checkpoints" / "step-5.pt")
    assert read_summary(tmp_path / "c")["status"] == "completed"


@pytest.mark.slow
def test_a_run_directory_is_held_by_one_process(tmp_path):
    lock = RunLock.acquire(tmp_path / "run")
    try:
        held = rf"in use by another trainwell process \(pid {os.getpid()}\)"
        with pytest.raises(UserError, match=held):
            fit(tmp_path / "run", "train.epochs=1", resume="auto")
    finally:
        lock.release()
    fit(tmp_path / "run", "train.epochs=1", resume="auto")  # free again: accepted
    assert read_summary(tmp_path / "run")["status"] == "completed"


@pytest.mark.slow
def test_a_second_process_is_refused_and_a_killed_holder_frees_the_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-m", "trainwell", "train", *BASE, "train.epochs=400",
            "data.kwargs.num_samples=4096", f"run.dir={tmp_path / 'run'}",
            "--resume", "auto"]  # fmt: skip
    first = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while not (tmp_path / "run" / "summary.json").exists() and time.time() < deadline:
            time.sleep(0.05)
        second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert f"pid {first.pid}" in second.stderr and len(second.stderr.splitlines()) == 1
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        third = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)  # fmt: skip
        seen = []
        for line in third.stdout:  # until it holds the run and trains
            seen.append(line)
            if line.startswith("trainwell run"):
                break
        third.send_signal(signal.SIGTERM)
        out, err = third.communicate(timeout=60)
        assert third.returncode == 128 + signal.SIGTERM, err[-2000:]
        assert "resuming from" in "".join(seen)
    finally:
        first.kill()


@pytest.mark.slow
def test_a_torn_last_pt_resumes_from_best_pt_not_from_scratch(tmp_path):
    full = fit(tmp_path / "full", "train.epochs=2")
    run = tmp_path / "run"
    shutil.copytree(tmp_path / "full", run)
    last = run / "checkpoints" / "last.pt"
    last.write_bytes(last.read_bytes()[:1000])
    best_before = (run / "checkpoints" / "best.pt").read_bytes()
    console = Console(record=True, width=300)
    cfg = load_config(overrides=[*BASE, f"run.dir={run}", "train.epochs=2"])
    again = trainwell.fit(cfg, resume="auto", console=console)
    text = console.export_text()
    assert "skipping unusable checkpoint" in text and "best.pt" in text
    assert "starting from scratch" not in text
    state = torch.load(run / "checkpoints" / "best.pt", weights_only=True)
    assert state["best"] == load_checkpoint(tmp_path / "full" / "checkpoints" / "best.pt")["best"]
    assert again.metrics["val/accuracy"] == full.metrics["val/accuracy"]
    assert len(best_before) > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "craft, match",
    [
        (lambda s: {"model": s["model"]}, "cannot be resumed: it has no 'optimizer'"),
        (lambda s: {k: v for k, v in s.items() if k != "scheduler"}, "no 'scheduler'"),
        (lambda s: {**s, "step": "12"}, "'step' is a str"),
        (lambda s: {**s, "config": torch.zeros(3)}, "'config' is a Tensor"),
        (lambda s: {**s, "model": {**s["model"], "0.weight": [1.0, 2.0]}}, "not a dense tensor"),
        (lambda s: {**s, "model": {k: v.to_sparse() if v.ndim == 2 else v
                                   for k, v in s["model"].items()}},
         "not a dense tensor"),  # fmt: skip
        (lambda s: {**s, "early_stop": {}}, "is malformed"),
    ],
)
def test_crafted_checkpoints_are_refused_with_one_line(tmp_path, cli, craft, match):
    fit(tmp_path / "src", "train.epochs=1")
    state = load_checkpoint(tmp_path / "src" / "checkpoints" / "last.pt")
    torch.save(craft(state), tmp_path / "crafted.pt")
    code, _, err = cli("train", *BASE, "train.epochs=2", "run.dir=new", "--resume", "crafted.pt")
    assert code == 2, err
    assert match in err and len(err.strip().splitlines()) == 1
    summary = tmp_path / "new" / "summary.json"
    assert not summary.exists() or read_summary(tmp_path / "new")["status"] != "running"


@pytest.mark.slow
def test_a_full_disk_during_a_checkpoint_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.EarlyWriteback, "write", full)
    full_disk = r"could not write checkpoint .*(best|last).pt: No space left on device \(ENOSPC\)"
    with pytest.raises(UserError, match=full_disk):
        fit(tmp_path / "run", "train.epochs=1")
    assert not list((tmp_path / "run" / "checkpoints").glob(".*.tmp"))
    assert read_summary(tmp_path / "run")["status"] == "failed"


@pytest.mark.slow
def test_a_disk_gone_read_only_still_gets_a_failed_summary(tmp_path, monkeypatch):
    real_open = open

    def read_only(path, mode="r", *args, **kwargs):
        if str(path).endswith("metrics.csv") and "a" in mode:
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", read_only)
    read_only_error = r"could not write .*metrics.csv: Read-only file system \(EROFS\)"
    with pytest.raises(UserError, match=read_only_error):
        fit(tmp_path / "run", "train.epochs=1")
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "failed" and "EROFS" in summary["error"]


class SignalOnRead(Dataset):
    """Samples that send this process a signal the first time one is read."""

    def __init__(self, signum: int, n: int = 64) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 8, generator=g), torch.randint(0, 4, (n,), generator=g)
        self.signum, self.sent = signum, False

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        if not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)
        return self.x[i], self.y[i]


@pytest.mark.slow
def test_a_sigterm_during_the_test_ends_interrupted_and_resumes(tmp_path):
    train = TensorDataset(torch.randn(128, 8), torch.randint(0, 4, (128,)))
    kw = dict(model=nn.Linear(8, 4), train_data=train, val_data=train)
    with pytest.raises(KeyboardInterrupt):
        fit(tmp_path / "run", "train.epochs=1", test_data=SignalOnRead(signal.SIGTERM), **kw)
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "interrupted"
    again = fit(tmp_path / "run", "train.epochs=1", resume="auto", test_data=SignalOnRead(0), **kw)
    assert read_summary(tmp_path / "run")["status"] == "completed" and "test/loss" in again.metrics


@pytest.mark.slow
def test_a_ctrl_c_during_start_up_is_one_line_and_writes_nothing(tmp_path, cli, monkeypatch):
    import tests.tasks_code as code

    monkeypatch.setattr(code, "make_regression", lambda: SignalOnRead(signal.SIGINT), raising=True)
    rc, _, err = cli("train", "data.name=tests.tasks_code:make_regression", "model.name=mlp",
                     "data.batch_size=16",
                     "train.epochs=1", "run.dir=run")  # fmt: skip
    assert rc == 130, err
    assert err.strip() == "trainwell: interrupted by SIGINT"
    assert not (tmp_path / "run" / "summary.json").exists()


@pytest.mark.slow
def test_a_killed_ddp_worker_leaves_a_failed_summary_and_a_full_resume_command(
    tmp_path, monkeypatch
):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "running"}))
    mark_failed(tmp_path, "a worker process failed (launcher exit code 1)")
    assert read_summary(tmp_path) == {
        "status": "failed",
        "error": "a worker process failed (launcher exit code 1)",
    }
    (tmp_path / "summary.json").write_text(json.dumps({"status": "interrupted"}))
    mark_failed(tmp_path, "x")
    assert read_summary(tmp_path)["status"] == "interrupted"  # what a worker said stays
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    command = resume_command(load_config(), tmp_path)
    assert command.startswith("trainwell train --nproc 2 --nnodes 2 --node-rank RANK")
    assert command.endswith(f"run.dir={tmp_path} --resume auto")


@pytest.mark.slow
def test_a_loss_that_stays_nan_fails_the_run(tmp_path, cli):
    x = torch.full((64, 8), float("nan"))
    y = torch.randint(0, 4, (64,))
    with pytest.raises(Diverged, match="stayed there"):
        fit(tmp_path / "run", "train.epochs=3", "doctor.enabled=false", model=nn.Linear(8, 4),
            train_data=TensorDataset(x, y))  # fmt: skip
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "failed" and summary["stop_reason"] == "diverged"
    assert summary["steps"] == 2  # stopped at the first epoch's end, not after three


@pytest.mark.slow
def test_label_types_are_checked_and_narrow_ints_widened(tmp_path):
    x = torch.randn(64, 8)
    y = torch.randint(0, 4, (64,))
    ok = fit(tmp_path / "i32", "train.epochs=1", model=nn.Linear(8, 4),
             train_data=TensorDataset(x, y.to(torch.int32)),
             val_data=TensorDataset(x, y.to(torch.uint8)))  # fmt: skip
    assert ok.metrics["val/accuracy"] >= 0
    float_labels = "CrossEntropyLoss takes class indices, but the targets are float32"
    with pytest.raises(UserError, match=float_labels):
        fit(tmp_path / "f", model=nn.Linear(8, 4), train_data=TensorDataset(x, y.float()))
    with pytest.raises(UserError, match="targets are tuple, not a tensor"):
        fit(tmp_path / "s", model=nn.Linear(8, 4),
            train_data=[(x[i], "cat" if y[i] else "dog") for i in range(64)])  # fmt: skip
    assert not (tmp_path / "f").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("seed", ["-1", str(2**62), str(2**70)])
def test_seeds_torch_cannot_take_are_refused_up_front(seed):
    with pytest.raises(UserError, match=r"run.seed: must be an integer in \[0, 2\*\*62\)"):
        load_config(overrides=[f"run.seed={seed}"])
    assert load_config(overrides=[f"run.seed={2**62 - 1}"]).run.seed == 2**62 - 1
