"""User callbacks: called at named points, able to stop the run, saved with it."""

from __future__ import annotations

import pytest
from rich.console import Console

import trainwell
from tests.conftest import SYNTHETIC, read_summary
from tests.docs_pages import docs_text
from tests.tasks_code import Recorder
from trainwell.config import load_config
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.engine.state.callbacks import CallbackError
from trainwell.errors import UserError

QUIET = Console(quiet=True)
BASE = [*SYNTHETIC, "train.precision=fp32", "doctor.enabled=false", "train.epochs=2"]


def fit(run_dir, *overrides, **kw):
    cfg = load_config(overrides=[*BASE, f"run.dir={run_dir}", *overrides])
    return trainwell.fit(cfg, console=QUIET, **kw)


def test_events_come_in_order_with_their_context(tmp_path):
    rec = Recorder()
    fit(tmp_path / "run", callbacks=[rec])
    kinds = [e[0] for e in rec.events]
    assert kinds == ["fit_start", "eval_end", "checkpoint", "eval_end", "checkpoint", "fit_end"]
    assert rec.events[0] == ("fit_start", 0)
    assert rec.events[1] == ("eval_end", 14, ["train/loss", "val/accuracy", "val/loss"])
    assert rec.events[2][2] in (("best.pt", "last.pt"), ("last.pt",))
    assert rec.events[-1] == ("fit_end", 28, False)  # no test split in the synthetic data
    assert rec.steps == 28
    assert (tmp_path / "run" / "recorder.txt").read_text() == "28 steps\n"


@pytest.mark.slow
def test_a_callback_stops_the_run_at_a_step_and_the_epoch_still_ends(tmp_path):
    result = fit(tmp_path / "run", callbacks=[Recorder(stop_at=5)])
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "completed" and summary["steps"] == 5
    assert summary["stop_reason"] == "stopped by callback Recorder"
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["step"] == 5
    assert "val/loss" in result.metrics


@pytest.mark.slow
def test_callback_state_is_saved_and_resumed_exactly(tmp_path):
    full = Recorder()
    fit(tmp_path / "full", "checkpoint.every_steps=5", "checkpoint.keep_last=100", callbacks=[full])
    state = load_checkpoint(tmp_path / "full" / "checkpoints" / "step-10.pt")
    assert state["callbacks"] == {"0:Recorder": {"steps": 10}}
    again = Recorder()
    fit(tmp_path / "again", callbacks=[again],
        resume=tmp_path / "full" / "checkpoints" / "step-10.pt")  # fmt: skip
    assert again.steps == full.steps == 28


@pytest.mark.slow
def test_callbacks_from_the_config_with_kwargs(cli, tmp_path):
    spec = "callbacks=[{name: tests.tasks_code:Recorder, kwargs: {stop_at: 3}}]"
    code, _, err = cli("train", *BASE, "run.dir=run", spec)
    assert code == 0, err
    summary = read_summary(tmp_path / "run")
    assert summary["steps"] == 3 and summary["stop_reason"] == "stopped by callback Recorder"


class Fails:
    def on_step_end(self, ctx):
        if ctx.step == 7:
            raise ValueError("bad rule")


@pytest.mark.slow
def test_a_failing_callback_stops_the_run_naming_it_and_leaves_it_resumable(tmp_path):
    with pytest.raises(CallbackError, match=r"callback Fails.on_step_end failed: ValueError: bad"):
        fit(tmp_path / "run", "checkpoint.every_steps=5", callbacks=[Fails()])
    assert read_summary(tmp_path / "run")["status"] == "failed"
    fit(tmp_path / "run", "checkpoint.every_steps=5", resume="auto")
    assert read_summary(tmp_path / "run")["status"] == "completed"


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec, match",
    [
        ("callbacks=[42]", "is not 'pkg.module:Cls'"),
        ("callbacks=[tests.tasks_code:make_regressor]", "defines none of on_fit_start"),
        ("callbacks=[tests.tasks_code:Nope]", "has no attribute"),
    ],
)
def test_bad_callback_specs_are_one_line(tmp_path, spec, match):
    with pytest.raises(UserError, match=match):
        fit(tmp_path / "run", spec)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_readme_callback_runs_as_written(tmp_path):
    import re


    readme = docs_text()
    (code,) = re.findall(r"```python\n(# tests/tasks_code.py holds a fuller one.*?)```", readme,
                         flags=re.S)  # fmt: skip
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - the README's own example
    fit(tmp_path / "run", "train.epochs=3", callbacks=[namespace["StopWhenGoodEnough"](0.0)])
    summary = read_summary(tmp_path / "run")
    assert summary["steps"] == 14 and summary["stop_reason"].startswith("stopped by callback")
