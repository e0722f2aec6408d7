"""trainwell lr-find: the learning-rate range test, on real small runs."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from rich.console import Console

import trainwell
from tests.conftest import SYNTHETIC
from trainwell.config import load_config
from trainwell.engine.tools.lr_find import lr_find, suggest_lr

QUIET = Console(quiet=True)


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    """One real range test on the synthetic data, read by several tests."""
    out = tmp_path_factory.mktemp("lr_find") / "out"
    cfg = load_config(overrides=[*SYNTHETIC, "train.precision=fp32"])
    return lr_find(cfg, start_lr=1e-5, end_lr=10.0, steps=60, output=out, console=QUIET)


@pytest.mark.slow
def test_suggestion_is_in_range_where_the_smoothed_loss_falls_fastest(found):
    s = found.smoothed
    assert found.suggestion is not None
    assert 1e-5 <= found.suggestion <= 10.0
    i = found.lrs.index(found.suggestion)
    # The loss falls through the suggestion, and has not bottomed out yet there.
    assert s[i + 2] < s[i] < s[i - 2]
    assert found.suggestion < found.min_loss_lr
    # The raw loss falls through it too: the steps before are higher than those after.
    raw = found.losses
    assert sorted(raw[i - 6 : i])[3] > sorted(raw[i : i + 6])[3]


@pytest.mark.slow
def test_the_suggested_lr_trains_better_than_the_start_of_the_range(found, tmp_path):
    val_loss = {}
    for lr in (found.suggestion, found.lrs[0]):
        run_dir = tmp_path / str(lr)
        overrides = [*SYNTHETIC, "train.epochs=1", f"optim.lr={lr}", f"run.dir={run_dir}"]
        cfg = load_config(overrides=overrides)
        val_loss[lr] = trainwell.fit(cfg, console=QUIET).metrics["val/loss"]
    assert val_loss[found.suggestion] < 0.8 * val_loss[found.lrs[0]], val_loss


@pytest.mark.slow
def test_cli_prints_the_suggestion_and_writes_csv_and_png(cli, tmp_path):
    code, out, err = cli("lr-find", *SYNTHETIC, "--steps", "30", "--output", "out")
    assert code == 0, err
    with open(tmp_path / "out" / "lr_find.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["lr", "loss", "smoothed"]
    lrs = [float(r["lr"]) for r in rows]
    assert lrs[0] == pytest.approx(1e-7) and lrs == sorted(lrs) and len(rows) <= 30
    assert all(math.isfinite(float(r["loss"])) for r in rows[:-1])
    png = (tmp_path / "out" / "lr_find.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    suggested = [line for line in out.splitlines() if "suggested lr" in line]
    assert len(suggested) == 1, out
    assert "optim.lr=" in out and "min-loss lr" in out
    shown = float(out.split("optim.lr=")[1].split()[0])
    assert min(lrs) <= shown <= max(lrs)


@pytest.mark.slow
def test_divergence_stops_the_test_early(tmp_path):
    cfg = load_config(overrides=[*SYNTHETIC, "train.precision=fp32", "train.grad_clip=0"])
    result = lr_find(cfg, start_lr=1e-4, end_lr=1e6, steps=80, output=tmp_path, console=QUIET)
    taken = len(result.lrs)
    assert result.stop_reason in ("diverged", "loss rose back") and taken < 80
    # It stopped at the first step whose smoothed loss passed 4x the best before it, or
    # (before that) whose recent raw losses gave back half of the fall.
    smoothed = result.smoothed
    assert all(smoothed[k] <= 4 * min(smoothed[:k]) for k in range(1, taken - 1))
    if result.stop_reason == "diverged":
        assert smoothed[-1] > 4 * min(smoothed[:-1])
    else:
        best = min(smoothed[10:-1])
        assert sorted(result.losses[-9:])[4] > best + 0.5 * (sorted(result.losses[:10])[4]
                                                             - best)  # fmt: skip
    # Below the divergence, a suggestion still comes out of the points before it.
    assert result.suggestion is not None and result.suggestion < result.lrs[-1]
    with open(result.output / "lr_find.csv") as f:
        assert len(f.read().splitlines()) == taken + 1


@pytest.mark.slow
def test_a_non_finite_loss_stops_the_test(tmp_path):
    calls = []

    def breaks_after_five(outputs, targets):
        calls.append(1)
        loss = torch.nn.functional.cross_entropy(outputs, targets)
        return loss * math.nan if len(calls) > 5 else loss

    cfg = load_config(overrides=SYNTHETIC)
    result = lr_find(cfg, loss_fn=breaks_after_five, steps=50, output=tmp_path, console=QUIET)
    assert result.stop_reason == "non-finite loss"
    assert len(result.lrs) == 6 and math.isnan(result.losses[-1])
    assert all(math.isfinite(v) for v in result.smoothed[:-1])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--start-lr", "1", "--end-lr", "0.1"], "--start-lr (1) must be below --end-lr (0.1)"),
        (["--start-lr", "0.1", "--end-lr", "0.1"], "must be below"),
        (["--steps", "1"], "--steps must be at least 2; got 1"),
        (["--start-lr", "0"], "--start-lr must be a positive number; got 0"),
        (["--end-lr=-1"], "--end-lr must be a positive number; got -1"),
        (["--start-lr", "nan"], "--start-lr must be a positive number"),
        (["optim.learning_rate=1"], "unknown config key 'optim.learning_rate'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, args, expected):
    code, _out, err = cli("lr-find", *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainwell: error: "), err
    assert expected in lines[0], lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_run_dir_and_a_given_model_are_left_alone(cli, tmp_path):
    run = tmp_path / "real_run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.pt").write_bytes(b"weights")
    (run / "summary.json").write_text('{"status": "completed"}')
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*"))
    code, _out, err = cli("lr-find", *SYNTHETIC, f"run.dir={run}", "--steps", "10")
    assert code == 0, err
    assert sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*")) == before
    (made,) = (tmp_path / "runs").iterdir()
    assert made.name.endswith("-lr_find-synthetic-mlp")
    assert sorted(p.name for p in made.iterdir()) == ["lr_find.csv", "lr_find.png"]

    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(8, 4))
    weights = {k: v.clone() for k, v in net.state_dict().items()}
    cfg = load_config(overrides=SYNTHETIC)
    lr_find(cfg, model=net, steps=10, output=tmp_path / "api", console=QUIET)
    for k, v in net.state_dict().items():
        assert torch.equal(v, weights[k]), k


def test_suggest_lr_on_known_curves():
    lrs = [10 ** (-6 + k / 10) for k in range(61)]  # 1e-6 .. 1
    # A loss that falls fastest (in log10 lr) at 1e-3.
    falling = [1.0 - math.tanh(2 * (math.log10(lr) + 3)) for lr in lrs]
    assert suggest_lr(lrs, falling) == pytest.approx(1e-3)
    # Non-finite points (the divergence) are ignored.
    assert suggest_lr(lrs + [10.0], falling + [math.nan]) == pytest.approx(1e-3)
    # A loss that never falls has no suggestion; neither has a curve of two points.
    assert suggest_lr(lrs, [1.0 + 0.01 * k for k in range(61)]) is None
    assert suggest_lr(lrs[:2], falling[:2]) is None


@pytest.mark.slow
def test_out_is_the_output_flag_as_for_every_verb(cli, tmp_path):
    code, out, err = cli("lr-find", *SYNTHETIC, "--steps", "12", "--out", "out2")
    assert code == 0, err
    assert (tmp_path / "out2" / "lr_find.csv").exists()
