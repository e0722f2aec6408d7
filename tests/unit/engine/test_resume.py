"""Exact resume: mid-epoch, after SIGTERM, after SIGKILL at any instant; bad checkpoints."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console
from torch.utils.data import TensorDataset

import trainwell
from tests.conftest import REPO, SYNTHETIC, model_csv, read_summary
from tests.procs_helpers import logged_step, saved_step, wait_for_step
from trainwell.config import load_config
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.engine.loading.loaders import ResumableSampler
from trainwell.engine.state.signals import GracefulStop, Interrupted
from trainwell.errors import UserError

QUIET = Console(quiet=True)

SMALL = [
    *SYNTHETIC,
    "train.epochs=3",
    "train.log_every=3",
    "checkpoint.every_steps=5",
    "checkpoint.keep_last=100",
]  # 14 optimizer steps per epoch; dropout on, so the torch RNG matters too


def fit(run_dir: Path, *overrides: str, resume=None, **kw):
    cfg = load_config(overrides=[*SMALL, f"run.dir={run_dir}", *overrides])
    return trainwell.fit(cfg, resume=resume, console=QUIET, **kw)


def reference_last(run_dir: Path) -> dict:
    return load_checkpoint(run_dir / "checkpoints" / "last.pt")["model"]


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workers", "steps"),
    # step 5: mid epoch 0; 15: one step into epoch 1; 25: mid epoch 1. With workers (each
    # fit starts worker processes: seconds on a busy machine) mid epoch 0 and 1 only.
    [(0, [5, 15, 25]), (2, [5, 25])],
)
def test_resume_mid_epoch_is_bitwise_identical(tmp_path, workers, steps):
    # Two epochs (28 steps) hold all three instants.
    common = [f"data.num_workers={workers}", "train.epochs=2"]
    full = fit(tmp_path / "full", *common)
    full_last = load_checkpoint(tmp_path / "full" / "checkpoints" / "last.pt")
    for step in steps:
        ckpt = tmp_path / "full" / "checkpoints" / f"step-{step}.pt"
        assert load_checkpoint(ckpt)["data"]["steps_into_epoch"] == step % 14
        again = fit(tmp_path / f"from-{step}", *common, resume=ckpt)
        assert again.metrics == full.metrics, step
        assert_same_state(full.model.state_dict(), again.model.state_dict())
        last = load_checkpoint(tmp_path / f"from-{step}" / "checkpoints" / "last.pt")
        for i, moments in full_last["optimizer"]["state"].items():
            for name in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(moments[name], last["optimizer"]["state"][i][name])


@pytest.mark.slow
def test_data_order_after_resume_is_the_uninterrupted_order(tmp_path):
    n = 256
    x = torch.cat([torch.arange(n, dtype=torch.float32)[:, None], torch.randn(n, 3)], dim=1)
    data = TensorDataset(x, torch.randn(n, 1))
    seen: list[list[int]] = []

    def loss_fn(out, target):
        return torch.nn.functional.mse_loss(out, target)

    def model():
        torch.manual_seed(0)
        net = torch.nn.Linear(4, 1)
        # Training batches only (the engine's pre-flight check runs in eval mode).
        net.register_forward_pre_hook(
            lambda m, a: seen.append(a[0][:, 0].int().tolist()) if m.training else None
        )
        return net

    common = ["data.batch_size=16", "train.grad_accum_steps=2", "checkpoint.every_steps=3"]
    fit(tmp_path / "a", *common, model=model(), train_data=data, loss_fn=loss_fn)
    uninterrupted = list(seen)
    seen.clear()
    fit(tmp_path / "b", *common, model=model(), train_data=data, loss_fn=loss_fn,
        resume=tmp_path / "a" / "checkpoints" / "step-9.pt")  # fmt: skip
    # 256 samples / 16 = 16 steps per epoch; step 9 is mid epoch 0; 2 micro-batches a step.
    assert seen == uninterrupted[9 * 2 :]
    epochs = [sorted(sum(uninterrupted[i * 32 : (i + 1) * 32], [])) for i in range(3)]
    assert all(e == list(range(n)) for e in epochs)  # every sample once per epoch
    assert uninterrupted[0] != uninterrupted[32]  # and the order changes between epochs


def test_resumable_sampler_skips_exactly():
    s = ResumableSampler(range(10), num_replicas=1, rank=0, seed=3)
    s.set_epoch(2)
    order = list(s)
    s.set_epoch(2, skip_samples=4)
    assert list(s) == order[4:] and len(s) == 6
    s.set_epoch(3)
    assert list(s) != order and sorted(s) == list(range(10))


def _launch(run_dir: Path, overrides: list[str]) -> subprocess.Popen:
    args = ["train", *overrides, f"run.dir={run_dir}", "--resume", "auto"]
    return subprocess.Popen(
        [sys.executable, "-m", "trainwell", *args],
        cwd=run_dir.parent,
        # One intra-op thread: on this 2-core VM about one process in fifteen computed one
        # AdamW update differently with two threads (half of one weight, 1e-6 apart), a
        # cross-process variation that is not resume's; in-process resume tests cover
        # the two-thread path.
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


CRASH = [
    "data.name=synthetic",
    "data.kwargs.num_samples=2048",
    "data.kwargs.shape=[32]",
    "data.kwargs.num_classes=4",
    "data.batch_size=32",
    "model.name=mlp",
    "model.kwargs.hidden=[256,256]",
    "train.epochs=4",
    "train.log_every=5",
    "checkpoint.every_steps=4",
    "checkpoint.keep_last=2",
]


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 60) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.001)
    return False


@pytest.mark.slow
def test_sigkill_at_many_instants_then_resume_gives_the_same_weights(tmp_path):
    run = tmp_path / "crashy"
    folder = run / "checkpoints"
    rng = random.Random(0)
    # Kill plans: during a save (a temporary checkpoint file exists), or just after a log
    # point (rows flushed to metrics.csv, 1 to 3 steps off the saves' phase); the last
    # launch runs to the end. Each kill waits for counted work, not for time: a random
    # number of steps past where the launch resumed, read from what the run has written.
    # 4 kills (each kind twice; all but the first in a launch that resumed after a kill)
    # of at most 40 steps each leave most of the 256 steps still to run, so every kill
    # lands in a live run.
    plans = ["save", "random", "save", "random", None]
    killed = []
    for plan in plans:
        # Rows logged after the newest checkpoint are the killed launch's: this one logs
        # them again, so it has to pass them too. A stale temporary file is deleted when
        # the launch resumes, before its first save.
        start = saved_step(folder)
        target = max(start, logged_step(run / "metrics.csv")) + rng.randint(1, 40)
        proc = _launch(run, CRASH)
        try:
            saving = lambda: any(folder.glob(".*.tmp"))  # noqa: E731
            if plan == "save":
                assert wait_for_step(proc, run, "saved", max(start + 1, target - 4)), plan
                assert _wait_for(saving, proc, 120), plan
            elif plan == "random":
                assert wait_for_step(proc, run, "logged", target), plan
            if plan is not None:
                proc.send_signal(signal.SIGKILL)
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        if plan is None:
            assert proc.returncode == 0, err
        else:
            killed.append(proc.returncode)
    # Every kill landed in a live run (none after it had finished).
    assert killed == [-signal.SIGKILL] * 4, killed
    assert read_summary(run)["status"] == "completed"
    assert not list(folder.glob(".*.tmp"))

    # The reference is a process like the others (same thread count), never killed.
    ref = _launch(tmp_path / "ref", CRASH)
    assert ref.wait(timeout=120) == 0, ref.communicate()[1]
    resumed = load_checkpoint(folder / "last.pt")
    # result.model holds the best weights; last.pt the last ones, compared like for like.
    assert_same_state(reference_last(tmp_path / "ref"), resumed["model"])
    assert model_csv(run / "metrics.csv") == model_csv(tmp_path / "ref" / "metrics.csv")


@pytest.mark.slow
def test_sigterm_then_resume_auto_matches_the_uninterrupted_run(tmp_path):
    overrides = [*CRASH, "checkpoint.every_steps=0"]
    run = tmp_path / "run"
    proc = _launch(run, overrides)
    try:
        assert _wait_for(lambda: (run / "checkpoints" / "last.pt").exists(), proc)
        time.sleep(0.2)  # somewhere in the middle of an epoch
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    summary = read_summary(run)
    assert summary["status"] == "interrupted"
    assert f"run.dir={run} --resume auto" in out.replace("\n", "")
    state = load_checkpoint(run / "checkpoints" / "last.pt")
    assert state["step"] == summary["steps"]

    proc = _launch(run, overrides)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f"resuming from {run / 'checkpoints' / 'last.pt'} at step {state['step']}" in (
        out.replace("\n", "")
    )
    ref = _launch(tmp_path / "ref", overrides)
    assert ref.wait(timeout=120) == 0, ref.communicate()[1]
    final = load_checkpoint(run / "checkpoints" / "last.pt")
    assert_same_state(reference_last(tmp_path / "ref"), final["model"])
    assert read_summary(run)["final"] == read_summary(tmp_path / "ref")["final"]
    assert model_csv(run / "metrics.csv") == model_csv(tmp_path / "ref" / "metrics.csv")


@pytest.mark.slow
def test_resume_auto_skips_an_unusable_newest_checkpoint(tmp_path):
    full = fit(tmp_path / "full")
    run = tmp_path / "run"
    shutil.copytree(tmp_path / "full", run)
    folder = run / "checkpoints"
    data = (folder / "step-40.pt").read_bytes()
    (folder / "step-40.pt").write_bytes(data[: len(data) // 2])  # a torn write
    for name, ahead in [("step-40.pt", 20), ("step-35.pt", 10)]:  # made the newest two
        os.utime(folder / name, (time.time() + ahead, time.time() + ahead))
    (folder / "last.pt").unlink()
    # step-40 (newest) is torn: resume from step-35 and still end bit-identical.
    console = Console(record=True, width=300)
    cfg = load_config(overrides=[*SMALL, f"run.dir={run}"])
    again = trainwell.fit(cfg, resume="auto", console=console)
    messages = console.export_text()
    assert "skipping unusable checkpoint" in messages and "step-40.pt" in messages
    assert "resuming from" in messages and "step-35.pt at step 35" in messages
    assert_same_state(full.model.state_dict(), again.model.state_dict())
    assert model_csv(run / "metrics.csv") == model_csv(tmp_path / "full" / "metrics.csv")


@pytest.mark.slow
def test_resume_auto_with_nothing_to_resume_starts_fresh(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    result = fit(run, "train.epochs=1", resume="auto")
    assert read_summary(run)["status"] == "completed" and result.metrics


@pytest.mark.slow
def test_resume_auto_needs_a_run_dir():
    with pytest.raises(UserError, match="--resume auto needs run.dir"):
        trainwell.fit(load_config(), resume="auto", console=QUIET)


@pytest.mark.slow
def test_deliberate_changes_are_reported_and_applied(tmp_path):
    fit(tmp_path / "a", "train.epochs=1")
    console = Console(record=True, width=300)
    cfg = load_config(overrides=[*SMALL, f"run.dir={tmp_path / 'a'}", "train.epochs=2",
                                 "optim.lr=0.01", "sched.name=constant"])  # fmt: skip
    result = trainwell.fit(cfg, resume="auto", console=console)
    text = console.export_text()
    assert "config changed since the checkpoint: train.epochs: 1 -> 2" in text
    assert "optim.lr: 0.003 -> 0.01" in text
    last = load_checkpoint(result.run_dir / "checkpoints" / "last.pt")
    assert last["step"] == 28
    assert last["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.01)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("model.kwargs.hidden=[64]", "the checkpoint does not fit this model"),
        ("optim.name=sgd", "optim.name changed from 'adamw' to 'sgd'"),
    ],
)
def test_incompatible_changes_are_refused(cli, tmp_path, change, expected):
    fit(tmp_path / "a", "train.epochs=1")
    ckpt = tmp_path / "a" / "checkpoints" / "last.pt"
    code, _, err = cli("train", *SMALL, "run.dir=b", change, "--resume", str(ckpt))
    assert code == 2
    assert expected in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("content", [b"", b"garbage" * 50, b"PK\x03\x04broken"])
def test_resume_from_a_bad_file_is_one_line(cli, tmp_path, content):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(content)
    code, _, err = cli("train", *SMALL, "run.dir=b", "--resume", "bad.pt")
    assert code == 2
    assert "bad.pt" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()


def test_resume_refuses_pickled_code(cli, tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"model": Payload(), "step": 1}, tmp_path / "evil.pt")
    code, _, err = cli("train", *SMALL, "run.dir=b", "--resume", "evil.pt")
    assert code == 2 and "pickled Python objects" in err
    assert not marker.exists()


def test_graceful_stop_flags_then_aborts_and_restores_handlers():
    before = {s: signal.getsignal(s) for s in GracefulStop.SIGNALS}
    with GracefulStop() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested and stop.signum == signal.SIGINT
        with pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), signal.SIGTERM)
        assert info.value.signum == signal.SIGTERM
    assert {s: signal.getsignal(s) for s in GracefulStop.SIGNALS} == before
