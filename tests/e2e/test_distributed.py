"""Several processes through PyTorch's launcher (gloo on CPU), with real processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

import trainwell
from tests import crash_at
from tests.conftest import REPO, SYNTHETIC, model_csv, read_summary
from trainwell.config import load_config
from trainwell.engine.checkpointing.checkpoint import load_checkpoint

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not built in"
)


BASE = [
    *SYNTHETIC,
    "model.kwargs.dropout=0.0",
    "train.precision=fp32",
    "train.epochs=3",
    "checkpoint.every_steps=5",
    "checkpoint.keep_last=100",
]  # 14 optimizer steps per epoch


def trainwell_cmd(*args: str, cwd: Path, env: dict | None = None, timeout: float = 180):
    return subprocess.run(
        [sys.executable, "-m", "trainwell", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + str(cwd), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run_dir / "checkpoints" / "last.pt")["model"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted 2-process run (with accumulation, so no_sync is exercised)."""
    root = tmp_path_factory.mktemp("dist")
    proc = trainwell_cmd("train", "--nproc", "2", *BASE, "train.grad_accum_steps=2",
                         f"run.dir={root / 'ref'}", cwd=root)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "ref"


@pytest.mark.slow
def test_two_processes_train_the_model_one_process_trains(reference, tmp_path):
    summary = read_summary(reference)
    assert summary["status"] == "completed" and summary["world_size"] == 2
    assert summary["batch"] == {"global": 32, "micro": 8, "grad_accum_steps": 2}
    single = trainwell.fit(load_config(overrides=[*BASE, f"run.dir={tmp_path / 'one'}"]),
                           console=Console(quiet=True))  # fmt: skip
    two = weights(reference)
    # Last weights against last weights (result.model holds the best ones).
    for name, tensor in weights(tmp_path / "one").items():
        torch.testing.assert_close(two[name], tensor, rtol=1e-5, atol=1e-6)
    assert summary["final"]["val/accuracy"] == single.metrics["val/accuracy"]
    # Evaluation counted every validation sample once: the loss matches one process.
    assert summary["final"]["val/loss"] == pytest.approx(single.metrics["val/loss"], rel=1e-5)


RECORDER = textwrap.dedent(
    """
    import os
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    def make_data(n=128):
        g = torch.Generator().manual_seed(0)
        x = torch.cat([torch.arange(n).float()[:, None], torch.randn(n, 3, generator=g)], 1)
        y = (x[:, 1] > 0).long()
        return {"train": TensorDataset(x, y), "val": TensorDataset(x[:41], y[:41])}

    class Recorder(nn.Module):
        def __init__(self, num_classes=2, input_shape=None):
            super().__init__()
            self.lin = nn.Linear(4, num_classes)

        def forward(self, x):
            if self.training:
                path = os.path.join(os.environ["RECORD_DIR"], f"rank{os.environ['RANK']}.txt")
                with open(path, "a") as f:
                    f.write(" ".join(str(int(v)) for v in x[:, 0]) + "\\n")
            return self.lin(x)
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_shards(folder: Path, epochs: int, steps: int) -> list[dict[int, list[int]]]:
    """Each epoch's sample indices per rank, as the Recorder wrote them."""
    lines = {r: (folder / f"rank{r}.txt").read_text().split("\n")[:-1] for r in (0, 1)}
    assert all(len(v) == epochs * steps for v in lines.values())
    return [
        {r: [int(i) for line in lines[r][epoch * steps : (epoch + 1) * steps]
             for i in line.split()]
         for r in (0, 1)}
        for epoch in range(epochs)
    ]  # fmt: skip


@pytest.mark.slow
def test_two_nodes_on_loopback_train_together_on_disjoint_reshuffled_shards(tmp_path):
    # One launch checks both: two one-process nodes (--nnodes 2 over loopback) make one
    # world of 2, and its shards are disjoint, cover the data and reshuffle each epoch.
    (tmp_path / "rec.py").write_text(RECORDER)
    common = ["train", "--nproc", "1", "--nnodes", "2", "--master-addr", "127.0.0.1",
              "--master-port", str(free_port()), "data.name=rec:make_data",
              "model.name=rec:Recorder", "data.batch_size=16", "train.epochs=2",
              "data.num_classes=2", "run.dir=run"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + str(tmp_path),
           "RECORD_DIR": str(tmp_path)}  # fmt: skip
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "trainwell", *common, "--node-rank", str(r)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for r in (0, 1)
    ]
    try:
        results = [n.communicate(timeout=180) for n in nodes]
    finally:
        for n in nodes:
            n.kill()
    for node, (_, err) in zip(nodes, results):
        assert node.returncode == 0, err[-3000:]
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "completed" and summary["world_size"] == 2
    orders = []
    for shard in read_shards(tmp_path, epochs=2, steps=128 // 16):
        assert not set(shard[0]) & set(shard[1])
        assert sorted(shard[0] + shard[1]) == list(range(128))
        orders.append(shard[0])
    assert orders[0] != orders[1]


@pytest.mark.slow
def test_a_crashed_worker_is_restarted_and_ends_where_the_clean_run_ends(reference, tmp_path):
    proc = trainwell_cmd(
        "train", "--nproc", "2", "--max-restarts", "1", *BASE, "train.grad_accum_steps=2",
        # Step 41 of 42: the restart resumes step-40.pt, mid last epoch, so the final
        # train/loss depends on every rank's running sums coming back.
        "run.dir=run", crash_at.override(41, rank=1), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming from" in proc.stdout and "step-40.pt" in proc.stdout
    ref, got = weights(reference), weights(tmp_path / "run")
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    assert read_summary(tmp_path / "run")["final"] == read_summary(reference)["final"]
    # Each rank resumed its own running sums (not rank 0's): every logged loss is exact.
    assert model_csv(tmp_path / "run" / "metrics.csv") == model_csv(reference / "metrics.csv")
    best = load_checkpoint(tmp_path / "run" / "checkpoints" / "best.pt")
    assert best["best"] == load_checkpoint(reference / "checkpoints" / "best.pt")["best"]


@pytest.mark.slow
def test_resume_a_two_process_run_from_a_mid_epoch_checkpoint(reference, tmp_path):
    ckpt = reference / "checkpoints" / "step-20.pt"  # epoch 1, 6 steps in
    state = load_checkpoint(ckpt)
    assert state["data"]["steps_into_epoch"] == 6 and len(state["rng_per_rank"]) == 2
    proc = trainwell_cmd("train", "--nproc", "2", *BASE, "train.grad_accum_steps=2",
                         "run.dir=run", "--resume", str(ckpt), cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref, got = weights(reference), weights(tmp_path / "run")
    assert all(torch.equal(ref[k], got[k]) for k in ref)


@pytest.mark.slow
def test_sigterm_stops_every_rank_at_one_step(tmp_path):
    args = ["train", "--nproc", "2", *BASE, "data.kwargs.num_samples=4096", "train.epochs=200",
            "checkpoint.every_steps=0", "run.dir=run"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainwell", *args], cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        last = tmp_path / "run" / "checkpoints" / "last.pt"
        deadline = time.time() + 120
        while not last.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert last.exists(), "training never reached its first checkpoint"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "interrupted"
    state = load_checkpoint(last)
    assert state["step"] == summary["steps"] and len(state["rng_per_rank"]) == 2


@pytest.mark.slow
def test_unused_parameters_are_named(tmp_path):
    (tmp_path / "unused.py").write_text(
        textwrap.dedent(
            """
            from torch import nn

            class Net(nn.Module):
                def __init__(self, num_classes=4, input_shape=None):
                    super().__init__()
                    self.used = nn.Linear(8, num_classes)
                    self.spare = nn.Linear(8, num_classes)  # never called

                def forward(self, x):
                    return self.used(x)
            """
        )
    )
    base = [a for a in BASE if not a.startswith("model.")]
    proc = trainwell_cmd("train", "--nproc", "2", *base, "model.name=unused:Net",
                         "train.epochs=1", "run.dir=run", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2
    assert "received no gradient under DDP: spare.weight, spare.bias" in proc.stderr
    assert "dist.find_unused_parameters=true" in proc.stderr


def test_global_batch_must_split_over_processes(cli, tmp_path):
    # Refused by the launcher before any worker starts: no process needed to see it.
    code, _, err = cli("train", "--nproc", "2", *BASE, "data.batch_size=33", "run.dir=run")
    assert code == 2
    assert "does not split into 2 processes" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_sync_batchnorm_on_the_cpu_is_a_clear_error(tmp_path):
    # DDP accepts SyncBatchNorm in GPU modules only; say so instead of its traceback.
    # On the small synthetic run: the default one (digits) only adds its loading.
    proc = trainwell_cmd("train", "--nproc", "2", *BASE, "train.max_steps=2", "train.epochs=1",
                         "dist.sync_batchnorm=true", "run.dir=run", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2
    assert "dist.sync_batchnorm needs CUDA devices" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_sync_batchnorm_on_two_gpus_matches_batchnorm_on_one(tmp_path):
    cnn = ["data.name=digits", "model.name=simple_cnn", "model.kwargs.dropout=0.0",
           "train.precision=fp32", "train.max_steps=10", "train.epochs=1"]  # fmt: skip
    proc = trainwell_cmd("train", "--nproc", "2", *cnn, "dist.sync_batchnorm=true",
                         "run.dir=two", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    trainwell.fit(load_config(overrides=[*cnn, f"run.dir={tmp_path / 'one'}"]),
                           console=Console(quiet=True))  # fmt: skip
    two = weights(tmp_path / "two")
    for name, tensor in weights(tmp_path / "one").items():
        torch.testing.assert_close(two[name], tensor.cpu(), rtol=1e-4, atol=1e-5)
