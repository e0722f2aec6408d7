"""A collective that breaks while the workers are being stopped is the stop, not a
failure: whether this rank's own signal has been handled yet, or only its launcher is
gone (the launcher's end stops every worker; one may stop before the other's handler
runs)."""

from __future__ import annotations

import os
import signal

import pytest

from trainwell.engine.distributed.worker_guard import LAUNCHER_PID_ENV, launcher_gone
from trainwell.engine.state.signals import GracefulStop, Interrupted, stopped_by_peer


@pytest.fixture
def two_ranks(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")


def _broken() -> RuntimeError:
    return RuntimeError("[gloo] Connection closed by peer")


def test_a_worker_whose_launcher_ended_reads_a_broken_collective_as_the_stop(
    two_ranks, monkeypatch
):
    monkeypatch.setenv(LAUNCHER_PID_ENV, str(os.getppid() + 100000))  # not our parent
    assert launcher_gone()
    told = stopped_by_peer(_broken(), GracefulStop())
    assert isinstance(told, Interrupted) and told.signum == signal.SIGTERM and told.abort


def test_a_worker_whose_launcher_lives_fails_on_a_broken_collective(two_ranks, monkeypatch):
    monkeypatch.setenv(LAUNCHER_PID_ENV, str(os.getppid()))
    assert not launcher_gone()
    error = _broken()
    assert stopped_by_peer(error, GracefulStop()) is error


def test_a_signalled_rank_reads_a_broken_collective_as_its_stop(two_ranks, monkeypatch):
    monkeypatch.delenv(LAUNCHER_PID_ENV, raising=False)
    stop = GracefulStop()
    stop.signum = signal.SIGINT
    told = stopped_by_peer(_broken(), stop)
    assert isinstance(told, Interrupted) and told.signum == signal.SIGINT


@pytest.mark.parametrize("error", [ValueError("a bug"), KeyError("x")])
def test_other_errors_and_one_process_are_failures(monkeypatch, error):
    monkeypatch.setenv(LAUNCHER_PID_ENV, str(os.getppid() + 100000))
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert stopped_by_peer(error, GracefulStop()) is error
    monkeypatch.setenv("WORLD_SIZE", "1")
    broken = _broken()
    assert stopped_by_peer(broken, GracefulStop()) is broken
