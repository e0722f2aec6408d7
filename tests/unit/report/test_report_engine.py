"""The engine writes report.html at the end of every run, completed, failed or
interrupted, and a report that cannot be drawn never fails the run."""

from __future__ import annotations

import signal

import pytest

import trainwell
from tests.conftest import SYNTHETIC, read_summary
from trainwell.engine.loop.progress import make_console
from trainwell.engine.state.signals import Interrupted

QUIET = make_console(quiet=True)


def cfg(tmp_path, *extra):
    return trainwell.load_config(
        overrides=[*SYNTHETIC, "train.epochs=2", f"run.dir={tmp_path / 'run'}", *extra]
    )


def assert_report_of(run, status):
    html = (run / "report.html").read_text()
    assert read_summary(run)["status"] == status
    assert status.upper() in html.upper() and "<script" in html


def test_a_completed_run_has_its_report(tmp_path):
    result = trainwell.fit(cfg(tmp_path), console=QUIET)
    assert_report_of(result.run_dir, "completed")


class Boom:
    def on_step_end(self, ctx):
        if ctx.step == 5:
            raise RuntimeError("the callback broke")


class Stop:
    def on_step_end(self, ctx):
        if ctx.step == 5:
            raise Interrupted(signal.SIGTERM)


@pytest.mark.slow
def test_a_failed_run_has_its_report(tmp_path):
    with pytest.raises(trainwell.UserError, match="the callback broke"):
        trainwell.fit(cfg(tmp_path), console=QUIET, callbacks=[Boom()])
    assert_report_of(tmp_path / "run", "failed")


@pytest.mark.slow
def test_an_interrupted_run_has_its_report(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        trainwell.fit(cfg(tmp_path), console=QUIET, callbacks=[Stop()])
    assert_report_of(tmp_path / "run", "interrupted")


@pytest.mark.slow
def test_a_report_that_cannot_be_drawn_does_not_fail_the_run(tmp_path, monkeypatch, capsys):
    from trainwell.report import render

    def broken(runs):
        raise ValueError("cannot draw")

    monkeypatch.setattr(render, "render_html", broken)
    result = trainwell.fit(cfg(tmp_path), console=QUIET)
    assert read_summary(result.run_dir)["status"] == "completed"
    assert not (result.run_dir / "report.html").exists()
    err = capsys.readouterr().err
    assert "no report.html" in err and "cannot draw" in err
