"""The engine's memory monitor (issue 26 §2): sustained growth at constant work warns once,
names the doctor's holder, and on request writes last.pt or stops cleanly; callbacks see
``train/mem/*``; ``run.cuda_alloc_conf`` reaches the environment before CUDA starts."""

from __future__ import annotations

import functools
import io
import os

import pytest
import torch
import torch.nn.functional as F

import trainwell
from tests.conftest import SYNTHETIC, read_summary
from trainwell.config import load_config
from trainwell.engine.checkpointing.checkpointer import Checkpointer
from trainwell.engine.loop import memory as memory_mod
from trainwell.engine.loop import trainer as trainer_mod
from trainwell.engine.loop.memory_watch import (
    MemoryWatch,
    apply_cuda_alloc_conf,
    holder_of,
    watch_step,
)
from trainwell.engine.loop.progress import make_console

HERE = "tests.unit.engine.test_memory_watch"
KEPT: list[torch.Tensor] = []


def leaky_step(model, batch):
    """Keeps 1 MB from every step, with its graph: memory that grows at constant work."""
    x, y = batch
    loss = F.cross_entropy(model(x), y)
    KEPT.append(torch.ones(256 * 1024) * loss)
    return loss


def clean_step(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


@pytest.fixture
def every_log_point(monkeypatch):
    """Walk the live tensors at every log point (the engine does it at most 1% of the time,
    the first after 10 s: right for a long run, too seldom for a short test)."""
    monkeypatch.setattr(memory_mod, "WALK_BUDGET", 1e9)
    monkeypatch.setattr(trainer_mod, "MemoryLog",
                        functools.partial(memory_mod.MemoryLog, first_walk_s=0))  # fmt: skip
    KEPT.clear()
    yield
    KEPT.clear()


def run(tmp_path, step: str, *extra: str, callbacks=()):
    out = io.StringIO()
    cfg = load_config(overrides=[*SYNTHETIC, "train.precision=fp32", "train.max_steps=40",
                                 "train.epochs=3", "train.log_every=2", f"train.step={HERE}:{step}",
                                 "doctor.memory_growth_mb=8", f"run.dir={tmp_path / 'run'}",
                                 *extra])  # fmt: skip
    result = trainwell.fit(cfg, console=make_console(out), callbacks=list(callbacks))
    return result, out.getvalue()


@pytest.mark.slow
def test_growth_warns_once_and_says_how_to_find_the_holder(tmp_path, every_log_point):
    result, out = run(tmp_path, "leaky_step")
    lines = [ln for ln in out.splitlines() if "memory growth:" in ln]
    assert len(lines) == 1, out
    assert "tensor_mb rose" in lines[0] and "at constant work" in lines[0]
    # Seen early (8 MB), before the doctor judged the holder: the line says how to find it.
    assert "to find the line that holds it" in lines[0]
    assert read_summary(result.run_dir)["steps"] == 40  # warn only: the run goes on


def test_the_warning_names_the_doctors_holder_when_it_has_one():
    class F:
        code, file, line = "graph-retained", "train.py", 42

    said: list[str] = []
    watch = MemoryWatch(threshold_mb=10, action="stop")
    actions = [watch_step(watch, 10 * i, {"mem/cuda_allocated_mb": mb}, lambda: [F()],
                          said.append) for i, mb in enumerate([50, 60, 70, 80, 90, 100])]
    assert actions[-1] == "stop" and actions.count("stop") == 1
    (line,) = said
    assert "cuda_allocated_mb rose 30.0 MB from step 20 to step 50" in line
    assert "the doctor found it: graph-retained at train.py:42" in line
    assert "the run stops now, cleanly" in line


@pytest.mark.slow
def test_stop_ends_the_run_cleanly_before_the_end(tmp_path, every_log_point):
    result, out = run(tmp_path, "leaky_step", "doctor.memory_growth_action=stop")
    summary = read_summary(result.run_dir)
    assert summary["status"] == "completed" and summary["steps"] < 40
    assert summary["stop_reason"].startswith("memory growth: stopped before an out-of-memory")
    assert (result.run_dir / "checkpoints" / "last.pt").exists()
    assert "the run stops now, cleanly" in out


@pytest.mark.slow
def test_checkpoint_writes_last_pt_at_the_step_and_goes_on(tmp_path, every_log_point,
                                                          monkeypatch):
    saves: list[tuple[int, list[str]]] = []
    real = Checkpointer.save

    def spy(self, run_dir, loggers, names):
        saves.append((self.loop.step, list(names)))
        return real(self, run_dir, loggers, names)

    monkeypatch.setattr(Checkpointer, "save", spy)
    result, out = run(tmp_path, "leaky_step", "doctor.memory_growth_action=checkpoint")
    (line,) = [ln for ln in out.splitlines() if "memory growth:" in ln]
    at = int(line.split(" to step ")[1].split()[0])
    assert (at, ["last.pt"]) in saves  # written at the step the growth was seen
    assert read_summary(result.run_dir)["steps"] == 40


class SeeMemory:
    def __init__(self):
        self.seen: dict[int, set[str]] = {}

    def on_step_end(self, ctx):
        self.seen[ctx.step] = {k for k in ctx.metrics if k.startswith("train/mem/")}


@pytest.mark.slow
def test_constant_memory_says_nothing_and_callbacks_see_the_figures(tmp_path, every_log_point):
    # One clean run, checked for both: no warning, and the figures at on_step_end.
    see = SeeMemory()
    _, out = run(tmp_path, "clean_step", callbacks=[see])
    assert "memory growth" not in out
    assert {"train/mem/rss_mb", "train/mem/tensor_mb"} <= see.seen[2]
    assert see.seen[1] == set()  # before the first log point there is nothing yet


@pytest.mark.parametrize(
    ("samples", "fires"),
    [
        ([5, 6, 9, 13, 18, 24], True),  # steady growth past the threshold
        ([5, 5, 5, 5, 5, 5, 5], False),  # flat
        ([5, 20, 6, 21, 5, 22, 6], False),  # up and down: variable-length batches
        ([5, 6, 7, 8, 9, 10], False),  # rising, but not past 10 MB
        ([100, 300, 5, 6, 9, 13, 18, 24], True),  # the first samples are not the baseline
    ],
)
def test_the_watch_fires_on_sustained_growth_only(samples, fires):
    watch = MemoryWatch(threshold_mb=10)
    results = [watch.update(10 * i, {"mem/tensor_mb": mb}) for i, mb in enumerate(samples)]
    assert (sum(r is not None for r in results) == 1) == fires
    assert sum(r is not None for r in results) <= 1  # once


def test_the_watch_is_off_at_zero_and_skips_log_points_without_the_figure():
    off = MemoryWatch(threshold_mb=0)
    assert all(off.update(i, {"mem/tensor_mb": 100.0 * i}) is None for i in range(10))
    watch = MemoryWatch(threshold_mb=1)
    assert watch.update(1, {"mem/rss_mb": 5.0}) is None and watch.samples == []


def test_holder_is_named_from_the_findings():
    class F:
        def __init__(self, code, file, line):
            self.code, self.file, self.line = code, file, line

    assert holder_of([F("nonfinite-loss", "a.py", 1), F("graph-retained", "t.py", 9)]) == (
        "graph-retained at t.py:9"
    )
    assert holder_of([F("nonfinite-loss", "a.py", 1)]) is None


@pytest.mark.parametrize(("override", "key"), [("doctor.memory_growth_mb=-1", "memory_growth_mb"),
                                               ("doctor.memory_growth_action=explode",
                                                "memory_growth_action")])  # fmt: skip
def test_bad_settings_are_one_line(cli, tmp_path, override, key):
    code, _, err = cli("train", *SYNTHETIC, override, f"run.dir={tmp_path / 'run'}")
    assert code == 2 and len(err.strip().splitlines()) == 1 and key in err


@pytest.mark.slow
def test_cuda_alloc_conf_is_set_before_cuda_starts(monkeypatch, tmp_path):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    said: list[str] = []
    apply_cuda_alloc_conf("expandable_segments:True", said.append)
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True" and not said
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    cfg = load_config(overrides=[*SYNTHETIC, "train.max_steps=1",
                                 "run.cuda_alloc_conf=expandable_segments:True",
                                 f"run.dir={tmp_path / 'run'}"])  # fmt: skip
    trainwell.fit(cfg, console=make_console(quiet=True))
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
