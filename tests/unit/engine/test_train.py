"""End-to-end training: run directories, the Python API, reproducibility, precision."""

from __future__ import annotations

import csv
import math
import signal
import textwrap
import time

import pytest
import torch
from torch.utils.data import TensorDataset

import trainwell
from tests.conftest import SYNTHETIC, model_csv, read_summary, run_subprocess
from trainwell.config import load_config
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.errors import UserError


def cfg_for(tmp_path, *overrides: str, name: str = "run"):
    return load_config(overrides=[f"run.dir={tmp_path / name}", *overrides])


def synthetic_cfg(tmp_path, *overrides: str, name: str = "run"):
    return cfg_for(tmp_path, *SYNTHETIC, "train.epochs=2", *overrides, name=name)


@pytest.mark.slow
def test_digits_run_directory(tmp_path):
    result = trainwell.fit(cfg_for(tmp_path, "train.epochs=3"))
    run = result.run_dir
    for name in ["config.yaml", "env.json", "metrics.csv", "summary.json", "curves.png"]:
        assert (run / name).is_file(), name
    summary = read_summary(run)
    assert summary["status"] == "completed"
    assert summary["steps"] == 3 * (1257 // 64)
    assert summary["best"]["metric"] == "val/accuracy"
    assert summary["test"]["accuracy"] == result.metrics["test/accuracy"] > 0.9
    assert summary["samples_per_s"] > 0 and summary["wall_time_s"] > 0
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert set(rows[0]) == {"step", "epoch", "split", "name", "value"}
    assert {(r["split"], r["name"]) for r in rows} >= {
        ("train", "loss"), ("train", "lr"), ("val", "loss"), ("val", "accuracy"),
        ("test", "accuracy"),
    }  # fmt: skip
    # The resolved config reruns as is.
    again = load_config(run / "config.yaml")
    assert again.train.epochs == 3 and again.run.dir == str(run)


@pytest.mark.slow
def test_checkpoints_hold_full_state_and_load_weights_only(tmp_path):
    result = trainwell.fit(synthetic_cfg(tmp_path, "train.precision=fp16"))
    for name in ["last.pt", "best.pt"]:
        state = torch.load(result.run_dir / "checkpoints" / name, weights_only=True)
        for key in ["model", "optimizer", "scheduler", "scaler", "step", "epoch", "config",
                    "rng", "data", "early_stop", "versions"]:  # fmt: skip
            assert key in state, (name, key)
        assert state["config"]["train"]["epochs"] == 2
        assert state["scaler"]["scale"] > 0  # fp16 runs through a GradScaler
        assert set(state["rng"]) >= {"python", "numpy", "torch"}
    last = load_checkpoint(result.run_dir / "checkpoints" / "last.pt")
    assert last["step"] == 2 * 14 and last["epoch"] == 1
    assert last["data"] == {"seed": 0, "epoch": 1, "steps_into_epoch": 14}
    assert last["optimizer"]["state"], "optimizer moments are saved"


@pytest.mark.slow
def test_test_metrics_use_the_best_checkpoint(tmp_path):
    result = trainwell.fit(cfg_for(tmp_path, "train.epochs=3"))
    best = load_checkpoint(result.run_dir / "checkpoints" / "best.pt")
    for name, tensor in result.model.state_dict().items():
        assert torch.equal(tensor, best["model"][name]), name


@pytest.mark.slow
def test_fit_api_with_objects(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 6, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    train, val = TensorDataset(x[:320], y[:320]), TensorDataset(x[320:], y[320:])
    cfg = cfg_for(tmp_path, "train.epochs=5", "data.batch_size=32", "optim.lr=0.05")
    calls = []

    def loss_fn(out, target):
        calls.append(1)
        return torch.nn.functional.cross_entropy(out, target)

    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    result = trainwell.fit(cfg, model=model, train_data=train, val_data=val, loss_fn=loss_fn)
    assert result.model is model and calls
    assert result.metrics["val/accuracy"] > 0.85
    assert "test/accuracy" not in result.metrics


@pytest.mark.slow
def test_user_model_and_data_by_import_path_from_yaml(tmp_path):
    (tmp_path / "models.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            def make_net(num_classes, input_shape, width=64):
                n_in = int(torch.tensor(input_shape).prod())
                return nn.Sequential(nn.Flatten(), nn.Linear(n_in, width), nn.ReLU(),
                                     nn.Linear(width, num_classes))

            def make_data(n=600):
                g = torch.Generator().manual_seed(1)
                x = torch.randn(n, 20, generator=g)
                return torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())
            """
        )
    )
    (tmp_path / "my.yaml").write_text(
        "model: {name: 'models:make_net', kwargs: {width: 32}}\n"
        "data: {name: 'models:make_data', batch_size: 32, num_classes: 2}\n"
        "train: {epochs: 4}\nrun: {dir: myrun}\n"
    )
    proc = run_subprocess(["train", "--config", "my.yaml", "optim.lr=1e-2"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = read_summary(tmp_path / "myrun")
    assert summary["status"] == "completed"
    assert summary["final"]["val/accuracy"] > 0.9
    saved = load_config(tmp_path / "myrun" / "config.yaml")
    assert saved.optim.lr == 0.01 and saved.model.kwargs == {"width": 32}


def _weights(result):
    return {k: v.clone() for k, v in result.model.state_dict().items()}


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_same_seed_is_bitwise_identical(tmp_path, workers):
    runs = []
    for name in ["a", "b"]:
        cfg = cfg_for(tmp_path, "train.epochs=2", f"data.num_workers={workers}", name=name)
        result = trainwell.fit(cfg)
        runs.append(
            (result.metrics, _weights(result), model_csv(result.run_dir / "metrics.csv"))
        )
    (m1, w1, csv1), (m2, w2, csv2) = runs
    assert m1 == m2
    assert csv1 == csv2
    assert all(torch.equal(w1[k], w2[k]) for k in w1)


@pytest.mark.slow
def test_another_seed_differs(tmp_path):
    a = trainwell.fit(synthetic_cfg(tmp_path, "run.seed=1", name="a"))
    b = trainwell.fit(synthetic_cfg(tmp_path, "run.seed=2", name="b"))
    assert not torch.equal(a.model[1].weight, b.model[1].weight)


@pytest.mark.slow
def test_gradient_accumulation_matches_the_full_batch(tmp_path):
    common = ["model.kwargs.dropout=0", "train.precision=fp32", "optim.name=sgd",
              "optim.lr=0.1", "train.grad_clip=0"]  # fmt: skip
    full = trainwell.fit(synthetic_cfg(tmp_path, *common, name="full"))
    accum = trainwell.fit(synthetic_cfg(tmp_path, *common, "train.grad_accum_steps=4", name="acc"))
    assert read_summary(accum.run_dir)["batch"] == {"global": 32, "micro": 8, "grad_accum_steps": 4}
    for k, v in full.model.state_dict().items():
        torch.testing.assert_close(accum.model.state_dict()[k], v, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_each_precision_trains(tmp_path, precision):
    cfg = synthetic_cfg(tmp_path, f"train.precision={precision}", "train.epochs=4", "optim.lr=0.02")
    result = trainwell.fit(cfg)
    summary = read_summary(result.run_dir)
    assert summary["precision"] == precision
    with open(result.run_dir / "metrics.csv") as f:
        losses = [
            float(r["value"])
            for r in csv.DictReader(f)
            if r["name"] == "loss" and r["split"] == "train"
        ]
    assert losses[-1] < losses[0] * 0.7


def test_auto_precision_follows_the_cpu(tmp_path, monkeypatch):
    import trainwell.env as env
    from trainwell.engine.step.precision import resolve_precision

    monkeypatch.setattr(env, "cpu_has_fast_bf16", lambda: False)
    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    monkeypatch.setattr(env, "cpu_has_fast_bf16", lambda: True)
    assert resolve_precision("auto", torch.device("cpu")) == "bf16"


@pytest.mark.slow
def test_max_steps_and_lr_schedule_per_optimizer_step(tmp_path):
    cfg = synthetic_cfg(tmp_path, "train.max_steps=20", "train.epochs=50", "sched.warmup_steps=5",
                        "train.log_every=1", "sched.min_lr_ratio=0.0")  # fmt: skip
    result = trainwell.fit(cfg)
    summary = read_summary(result.run_dir)
    assert summary["steps"] == 20 and summary["stop_reason"] == "max_steps"
    with open(result.run_dir / "metrics.csv") as f:
        lrs = [float(r["value"]) for r in csv.DictReader(f) if r["name"] == "lr"]
    assert len(lrs) == 20
    # The lr logged after step s is the one the next step uses.
    assert lrs[3] == pytest.approx(3e-3 * 5 / 5)
    assert lrs[0] == pytest.approx(3e-3 * 2 / 5)
    assert lrs[12] == pytest.approx(3e-3 * 0.5 * (1 + math.cos(math.pi * 8 / 15)))


@pytest.mark.slow
def test_early_stopping(tmp_path):
    cfg = synthetic_cfg(tmp_path, "train.epochs=30", "optim.lr=1e-9", "sched.name=constant",
                        "early_stop.patience=2", "early_stop.monitor=val/loss",
                        "early_stop.min_delta=0.01")  # fmt: skip
    summary = read_summary(trainwell.fit(cfg).run_dir)
    assert summary["stop_reason"].startswith("early stop")
    assert summary["steps"] == 3 * 14  # best at epoch 1, then two without improvement


@pytest.mark.slow
def test_step_checkpoints_rotate(tmp_path):
    cfg = synthetic_cfg(tmp_path, "checkpoint.every_steps=5", "checkpoint.keep_last=2")
    result = trainwell.fit(cfg)
    names = sorted(p.name for p in (result.run_dir / "checkpoints").iterdir())
    assert names == ["best.pt", "last.pt", "step-20.pt", "step-25.pt"]


@pytest.mark.slow
def test_full_disk_at_save_fails_cleanly(tmp_path, monkeypatch):
    import errno

    import trainwell.engine.checkpointing.checkpoint as ckpt

    def full(state, path, **kwargs):
        raise OSError(errno.ENOSPC, f"could not write checkpoint {path}: No space left on device")

    monkeypatch.setattr(ckpt, "save_atomic", full)
    with pytest.raises(UserError, match="No space left on device"):
        trainwell.fit(synthetic_cfg(tmp_path))
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "failed" and "No space left" in summary["error"]


@pytest.mark.slow
def test_signal_handlers_are_restored(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    trainwell.fit(synthetic_cfg(tmp_path))
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.slow
def test_sigterm_saves_state_and_marks_interrupted(tmp_path):
    args = ["train", "run.dir=run", "train.epochs=500", "data.name=synthetic",
            "data.kwargs.num_samples=4096", "model.name=mlp"]  # fmt: skip
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    proc = subprocess.Popen(
        [sys.executable, "-m", "trainwell", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 60
        last = tmp_path / "run" / "checkpoints" / "last.pt"
        while not last.exists() and time.time() < deadline:
            time.sleep(0.2)
        assert last.exists(), "training never reached its first checkpoint"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "interrupted"
    state = load_checkpoint(last)
    assert state["step"] == summary["steps"] > 0
    assert "interrupted" in out


@pytest.mark.slow
def test_default_recipe_reaches_98_percent_on_digits(tmp_path):
    """The built-in default (what `trainwell train` runs) as a golden check."""
    result = trainwell.fit(cfg_for(tmp_path))
    assert result.metrics["test/accuracy"] >= 0.98
    assert read_summary(result.run_dir)["steps"] == 20 * (1257 // 64)


@pytest.mark.slow
def test_progress_bar_on_a_terminal_and_lines_elsewhere(tmp_path):
    import io

    from rich.console import Console

    buf = io.StringIO()
    trainwell.fit(synthetic_cfg(tmp_path, name="a"), console=Console(file=buf, width=150))
    plain = buf.getvalue()
    assert "epoch 1/2  step 14" in plain and "\x1b[" not in plain
    buf = io.StringIO()
    console = Console(file=buf, width=150, force_terminal=True)
    trainwell.fit(synthetic_cfg(tmp_path, "train.log_every=1", name="b"), console=console)
    shown = buf.getvalue()
    assert "samples/s" in shown and "\x1b[" in shown  # the live bar was drawn


@pytest.mark.slow
def test_logged_train_loss_is_the_mean_of_its_window_across_epochs(tmp_path):
    # 14 steps per epoch with log_every=5: windows straddle epoch ends.
    losses: list[float] = []

    def loss_fn(out, target):
        loss = torch.nn.functional.cross_entropy(out, target)
        losses.append(loss.item())
        return loss

    x = torch.randn(448, 4, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(x, (x[:, 0] > 0).long())
    cfg = cfg_for(tmp_path, "data.batch_size=32", "train.epochs=2", "train.log_every=5",
                  "train.precision=fp32")  # fmt: skip
    result = trainwell.fit(cfg, model=torch.nn.Linear(4, 2), train_data=data, loss_fn=loss_fn)
    with open(result.run_dir / "metrics.csv") as f:
        logged = [(int(r["step"]), float(r["value"])) for r in csv.DictReader(f)
                  if r["split"] == "train" and r["name"] == "loss"]  # fmt: skip
    # Windows: epoch 0 -> steps 1-5, 6-10, 11-14 (epoch end); epoch 1 -> 15, 16-20, ...
    assert [s for s, _ in logged] == [5, 10, 15, 20, 25, 28]
    windows = [(0, 5), (5, 10), (14, 15), (15, 20), (20, 25), (25, 28)]
    for (step, value), (a, b) in zip(logged, windows):
        assert value == pytest.approx(sum(losses[a:b]) / (b - a), rel=1e-5), step
    assert result.metrics["train/loss"] == pytest.approx(sum(losses[14:28]) / 14, rel=1e-5)
