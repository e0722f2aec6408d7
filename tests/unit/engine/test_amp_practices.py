"""The articles' AMP practices (issue 26 §3-4): the precision named with its reason, fp16's
scale and skipped steps as metrics, modules kept in fp32 under autocast, and the default
warmup with ``sched.warmup_ratio``."""

from __future__ import annotations

import csv
import io

import pytest
import torch
from torch import nn

import trainwell
from tests.conftest import SYNTHETIC
from trainwell.config import load_config
from trainwell.engine.build.optim import SchedConfig, lr_factor, warmup_length
from trainwell.engine.loop.amp import keep_fp32, precision_line
from trainwell.engine.loop.progress import make_console
from trainwell.engine.state.loop_state import LoopState
from trainwell.errors import UserError

QUIET = make_console(quiet=True)


def rows(run_dir) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["split"] == "train"]


def series(run_dir, name: str) -> list[float]:
    split, _, short = name.partition("/")
    return [float(r["value"]) for r in rows(run_dir) if r["name"] == short]


# -- the precision line --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "resolved", "device", "expected"),
    [
        ("auto", "fp32", "cpu", "auto: no native bf16 on this CPU"),
        ("auto", "bf16", "cpu", "auto: this CPU computes bf16 natively"),
        ("auto", "bf16", "cuda", "auto: this GPU computes bf16"),
        ("auto", "fp16", "cuda", "this GPU has no bf16, so fp16 with a GradScaler"),
        ("fp16", "fp16", "cpu", "(train.precision=fp16)"),
        ("fp32", "fp32", "cpu", "(train.precision=fp32)"),
    ],
)
def test_the_precision_line_says_why(requested, resolved, device, expected):
    line = precision_line(requested, resolved, torch.device(device))
    assert line.startswith(f"precision: {resolved} (") and expected in line
    # Under AMP it says how to debug numerics; in fp32 there is nothing to turn off.
    assert ("train.precision=fp32 to debug numerics" in line) == (resolved != "fp32")


@pytest.mark.slow
def test_a_run_names_its_precision_in_its_first_lines(tmp_path):
    out = io.StringIO()
    cfg = load_config(overrides=[*SYNTHETIC, "train.max_steps=2", "train.precision=bf16",
                                 f"run.dir={tmp_path / 'run'}"])  # fmt: skip
    trainwell.fit(cfg, console=make_console(out))
    lines = out.getvalue().splitlines()
    assert lines[1] == (
        "precision: bf16 (train.precision=bf16); train.precision=fp32 to debug numerics"
    )


# -- fp16: the scale and the skipped steps -------------------------------------------------


def _adam_steps(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    return int(optimizer.state[next(model.parameters())]["step"])


class KeepOptimizer:
    """Keeps the run's optimizer and model at the end (to count the steps it applied)."""

    def on_fit_end(self, ctx):
        self.optimizer, self.model = ctx.optimizer, ctx.model


@pytest.mark.slow
def test_fp16_logs_the_scale_and_counts_exactly_the_skipped_steps(tmp_path):
    keep = KeepOptimizer()
    cfg = load_config(overrides=[*SYNTHETIC, "train.max_steps=12", "train.log_every=3",
                                 "train.precision=fp16", "train.grad_clip=0",
                                 f"run.dir={tmp_path / 'run'}"])  # fmt: skip
    result = trainwell.fit(cfg, console=QUIET, callbacks=[keep])
    scales, skipped = series(result.run_dir, "train/amp_scale"), series(result.run_dir,
                                                                        "train/amp_skipped")
    assert len(scales) == len(skipped) == 4 and all(s > 0 for s in scales)
    # Counted independently: the optimizer's own count of the steps it applied.
    applied = _adam_steps(keep.model, keep.optimizer)
    assert skipped[-1] == 12 - applied
    assert skipped == sorted(skipped)  # a running count
    # GradScaler starts at 2**16; every skip halves it, the run had no growth interval yet.
    assert scales[-1] == 2.0**16 / 2 ** skipped[-1]


@pytest.mark.slow
def test_an_overflowing_fp16_step_is_counted_as_skipped(tmp_path):
    keep = KeepOptimizer()
    cfg = load_config(overrides=[*SYNTHETIC, "train.max_steps=8", "train.log_every=4",
                                 "train.precision=fp16",
                                 "train.step=tests.amp_steps:overflow_at_step",
                                 f"run.dir={tmp_path / 'run'}"])  # fmt: skip
    result = trainwell.fit(cfg, console=QUIET, callbacks=[keep])
    skipped = series(result.run_dir, "train/amp_skipped")
    applied = _adam_steps(keep.model, keep.optimizer)
    assert skipped[-1] == 8 - applied >= 2  # the planted overflows, at least


@pytest.mark.slow
def test_bf16_and_fp32_log_no_scaler_figures(tmp_path):
    for precision in ("fp32", "bf16"):
        cfg = load_config(overrides=[*SYNTHETIC, "train.max_steps=4", "train.log_every=2",
                                     f"train.precision={precision}",
                                     f"run.dir={tmp_path / precision}"])  # fmt: skip
        names = {r["name"] for r in rows(trainwell.fit(cfg, console=QUIET).run_dir)}
        assert "loss" in names and not {"amp_scale", "amp_skipped"} & names


def test_the_skipped_count_is_checkpointed():
    state = LoopState(torch.device("cpu"))
    state.amp_skipped += 3
    saved = state.state_dict()
    other = LoopState(torch.device("cpu"))
    counter = other.amp_skipped
    other.load_state_dict(saved)
    assert int(other.amp_skipped) == 3 and other.amp_skipped is counter  # loaded in place
    del saved["amp_skipped"]  # a checkpoint from before the count was kept
    other.load_state_dict(saved)
    assert int(other.amp_skipped) == 0


# -- train.fp32_modules --------------------------------------------------------------------


class Probe(nn.Module):
    """Records the dtype of its input and whether autocast was on inside its forward."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.seen: list[tuple[torch.dtype, bool]] = []

    def forward(self, x):
        y = self.lin(x)
        self.seen.append((x.dtype, torch.is_autocast_enabled("cpu")))
        return y


def _net() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 4), Probe(), nn.Sequential(Probe(), nn.Linear(4, 2)))


def test_fp32_modules_run_in_fp32_inside_autocast_and_the_rest_does_not():
    net = _net()
    assert keep_fp32(net, ["2.0"], "cpu") == ["2.0"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(torch.ones(3, 4))
    assert net[1].seen == [(torch.bfloat16, True)]  # untouched: autocast as usual
    assert net[2][0].seen == [(torch.float32, False)]  # kept: fp32 in, autocast off
    assert net[2][0].lin.weight.dtype == torch.float32
    out.float().sum().backward()  # gradients flow through the cast
    assert net[0].weight.grad is not None


def test_fp32_modules_globs_match_by_name_and_leave_state_dicts_alone():
    net = _net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    assert keep_fp32(net, ["*.lin", "1"], "cpu") == ["1.lin", "2.0.lin", "1"]
    assert list(net.state_dict()) == list(before)
    keep_fp32(net, ["1"], "cpu")  # applying twice wraps once
    with torch.autocast("cpu", dtype=torch.bfloat16):
        net(torch.ones(2, 4))
    assert net[1].seen == [(torch.float32, False)]


@pytest.mark.parametrize("globs", [["head"], ["*.norm"], ["0", "decoder.*"]])
def test_a_glob_that_matches_no_module_is_one_line(globs):
    with pytest.raises(UserError, match="train.fp32_modules: .* matches no module of the model"):
        keep_fp32(_net(), globs, "cpu")


@pytest.mark.slow
def test_fp32_modules_in_a_real_run_and_from_the_cli(cli, tmp_path):
    out = io.StringIO()
    cfg = load_config(overrides=[*SYNTHETIC, "train.max_steps=3", "train.precision=bf16",
                                 "train.fp32_modules=['4']",
                                 f"run.dir={tmp_path / 'run'}"])  # fmt: skip
    trainwell.fit(cfg, console=make_console(out))
    assert "train.fp32_modules: 4 run in fp32 under bf16 autocast" in out.getvalue()
    code, _, err = cli("train", *SYNTHETIC, "train.max_steps=2", "train.fp32_modules=[nohead]",
                       f"run.dir={tmp_path / 'bad'}")  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "'nohead' matches no module" in err
    code, _, err = cli("train", *SYNTHETIC, "train.fp32_modules=3", f"run.dir={tmp_path / 'b2'}")
    assert code == 2 and "train.fp32_modules" in err


# -- warmup --------------------------------------------------------------------------------


def test_warmup_is_on_by_default_as_a_share_of_the_run():
    cfg = SchedConfig()
    assert warmup_length(cfg, 400) == 20
    assert [lr_factor(cfg, s, 400) for s in (0, 9, 19)] == pytest.approx([0.05, 0.5, 1.0])
    assert lr_factor(SchedConfig(warmup_ratio=0.0), 0, 400) == 1.0
    # sched.warmup_steps, when set, is the warmup's length.
    assert warmup_length(SchedConfig(warmup_steps=3, warmup_ratio=0.5), 400) == 3
    assert warmup_length(SchedConfig(warmup_ratio=0.25), 10) == 2


@pytest.mark.slow
def test_the_default_run_warms_up(tmp_path):
    cfg = load_config(overrides=[*SYNTHETIC, "train.max_steps=100", "train.log_every=1",
                                 "optim.lr=0.01", f"run.dir={tmp_path / 'a'}"])  # fmt: skip
    lrs = series(trainwell.fit(cfg, console=QUIET).run_dir, "train/lr")
    # 100 steps, a warmup of 5; the lr logged after step k is the one step k+1 will take.
    assert lrs[:4] == pytest.approx([0.004, 0.006, 0.008, 0.01])
    cfg = load_config(overrides=[*SYNTHETIC, "train.max_steps=100", "train.log_every=1",
                                 "optim.lr=0.01", "sched.warmup_ratio=0",
                                 f"run.dir={tmp_path / 'b'}"])  # fmt: skip
    lrs = series(trainwell.fit(cfg, console=QUIET).run_dir, "train/lr")
    assert lrs[0] == pytest.approx(0.01, rel=1e-3)  # off: the peak from the start


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("sched.warmup_ratio=1.0", "sched.warmup_ratio"),
        ("sched.warmup_ratio=-0.1", "sched.warmup_ratio"),
        ("sched.warmup_ratio=abc", "sched.warmup_ratio"),
    ],
)
def test_a_bad_warmup_ratio_is_one_line(cli, tmp_path, override, match):
    code, _, err = cli("train", *SYNTHETIC, override, f"run.dir={tmp_path / 'run'}")
    assert code == 2 and len(err.strip().splitlines()) == 1 and match in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_warmup_ratio_for_a_scheduler_given_by_import_path_is_refused(cli, tmp_path):
    code, _, err = cli("train", *SYNTHETIC, "sched.name=torch.optim.lr_scheduler:StepLR",
                       "sched.kwargs.step_size=5", "sched.warmup_ratio=0.2",
                       f"run.dir={tmp_path / 'run'}")  # fmt: skip
    assert code == 2 and "applies to the built-in schedules" in err
    # The default ratio is not the user's: an import-path scheduler runs as it is.
    cfg = load_config(overrides=[*SYNTHETIC, "sched.name=torch.optim.lr_scheduler:StepLR",
                                 "sched.kwargs.step_size=5", "train.max_steps=2",
                                 f"run.dir={tmp_path / 'ok'}"])  # fmt: skip
    trainwell.fit(cfg, console=QUIET)
