"""A user step in real processes: SIGKILL then exact resume, and DDP parity on 2 processes."""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, model_csv, read_summary
from tests.procs_helpers import logged_step, saved_step, wait_for_step
from trainwell.cli import main
from trainwell.engine.checkpointing.checkpoint import load_checkpoint

CODE = "tests.tasks_code"
# Dict batches with string ids, a padding collate, two extra metrics (one a ratio).
LM = [
    f"data.name={CODE}:make_lm_data",
    f"data.collate={CODE}:pad",
    f"model.name={CODE}:make_lm",
    f"train.step={CODE}:lm_step",
    "data.batch_size=16",
    "train.epochs=12",
    "train.log_every=4",
    "train.precision=fp32",
    "checkpoint.every_steps=3",
    "checkpoint.keep_last=2",
]


def trainwell_proc(args: list[str], cwd: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "trainwell", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kw)  # fmt: skip


def run_to_end(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = trainwell_proc(args, cwd)
    out, err = proc.communicate(timeout=240)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def run_here(args: list[str]) -> subprocess.CompletedProcess:
    """The same command in this process, on one thread as ``trainwell_proc`` gives its
    processes: for the runs the others are compared with, which are not about processes."""
    out, err, threads = io.StringIO(), io.StringIO(), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
    finally:
        torch.set_num_threads(threads)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.mark.slow
def test_user_step_resumes_bit_identically_after_sigkill(tmp_path):
    ref = run_here(["train", *LM, f"run.dir={tmp_path / 'ref'}"])
    assert ref.returncode == 0, ref.stderr[-2000:]
    run = tmp_path / "crashy"
    folder = run / "checkpoints"
    rng = random.Random(1)
    # Each kill waits for counted work, not for time: a random number of steps past where
    # the launch resumed, read from the checkpoints (every 3 steps) or the log rows (every
    # 4) the run has written. 3 kills of at most 12 steps each leave most of the 72 steps
    # (96 sequences / 16 x 12 epochs) still to run, so every kill lands in a live run.
    killed = []
    for plan in ["logged", "saved", "logged", None]:
        start = max(saved_step(folder), logged_step(run / "metrics.csv"))
        target = start + rng.randint(1, 12)
        proc = trainwell_proc(["train", *LM, f"run.dir={run}", "--resume", "auto"], tmp_path)
        try:
            if plan is not None:
                assert wait_for_step(proc, run, plan, target), plan
                proc.send_signal(signal.SIGKILL)
            out, err = proc.communicate(timeout=240)
        finally:
            proc.kill()
        if plan is not None:
            killed.append(proc.returncode)
    assert proc.returncode == 0, err[-2000:]
    # Every kill landed in a live run (none after it had finished).
    assert killed == [-signal.SIGKILL] * 3, killed
    assert read_summary(run)["final"] == read_summary(tmp_path / "ref")["final"]
    a = load_checkpoint(run / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "ref" / "checkpoints" / "last.pt")
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for key in ("window", "epoch_sums"):  # the running sums of the metrics, too
        for name, total in b["loop"][key]["sums"].items():
            assert torch.equal(a["loop"][key]["sums"][name], total), (key, name)
    csv_a = model_csv(run / "metrics.csv")
    assert csv_a == model_csv(tmp_path / "ref" / "metrics.csv")
    assert ",train,token_acc," in csv_a and ",val,ppl," in csv_a


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_user_step_on_two_processes_trains_what_one_process_trains(tmp_path):
    args = [f"data.name={CODE}:make_regression", f"model.name={CODE}:make_regressor",
            f"train.step={CODE}:regression_step", "data.batch_size=32", "train.epochs=3",
            "train.grad_accum_steps=2", "train.precision=fp32", "doctor.enabled=false"]  # fmt: skip
    two = run_to_end(["train", "--nproc", "2", *args, f"run.dir={tmp_path / 'two'}"], tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    one = run_here(["train", *args, f"run.dir={tmp_path / 'one'}"])
    assert one.returncode == 0, one.stderr[-3000:]
    a = load_checkpoint(tmp_path / "two" / "checkpoints" / "last.pt")["model"]
    b = load_checkpoint(tmp_path / "one" / "checkpoints" / "last.pt")["model"]
    for name, tensor in b.items():
        torch.testing.assert_close(a[name], tensor, rtol=1e-5, atol=1e-6)
    final_two = read_summary(tmp_path / "two")["final"]
    final_one = read_summary(tmp_path / "one")["final"]
    assert final_two.keys() == final_one.keys() >= {"train/mae", "val/mae", "val/loss"}
    for key, value in final_one.items():
        # Every sample counted once over the ranks: the same means, to rounding.
        assert final_two[key] == pytest.approx(value, rel=1e-5), key
