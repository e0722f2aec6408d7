"""One completed run per test module, and a fresh copy of it per test: what the resume
tests damage (a checkpoint made unreadable, a shard garbled, metrics.csv cut) is the copy.

Example (in a test module)::

    finished = finished_run_fixture("metrics", RUN)
    run = run_copy_fixture()
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rich.console import Console

import trainwell
from trainwell.config import load_config


def finished_run_fixture(name: str, overrides: list[str]):
    """A module-scoped fixture: ``overrides`` trained once to the end, in its own folder."""

    @pytest.fixture(scope="module")
    def finished(tmp_path_factory) -> Path:
        run = tmp_path_factory.mktemp(name) / "run"
        cfg = load_config(overrides=[*overrides, f"run.dir={run}"])
        trainwell.fit(cfg, console=Console(quiet=True))
        return run

    return finished


def run_copy_fixture():
    """A fixture: a copy of the module's ``finished`` run, for one test to change."""

    @pytest.fixture
    def run(finished, tmp_path) -> Path:
        copy = tmp_path / "run"
        shutil.copytree(finished, copy)
        return copy

    return run
