"""The versions a checkpoint was written by are compared on resume (one line when they
differ; the resume goes on), and a checkpoint format newer than this code reads is
refused with one line, never skipped and never misread."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import trainwell
from tests.conftest import SYNTHETIC, read_summary
from tests.finished_run import finished_run_fixture, run_copy_fixture
from trainwell.engine.checkpointing import checkpoint as ckpt
from trainwell.engine.checkpointing.checkpoint import TooNew, load_checkpoint, save_atomic

RUN = [*SYNTHETIC, "train.epochs=1", "checkpoint.every_steps=5"]


finished = finished_run_fixture("versions", RUN)


run = run_copy_fixture()


def rewrite(path: Path, **changes) -> None:
    state = load_checkpoint(path)
    for key, value in changes.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    save_atomic(state, path)


def resume(cli, run: Path, *args: str) -> tuple[int, str, str]:
    return cli("train", *RUN, "train.epochs=2", f"run.dir={run}", *args)


def test_new_checkpoints_record_their_format_and_versions(finished):
    state = load_checkpoint(finished / "checkpoints" / "last.pt")
    assert state["format"] == ckpt.FORMAT
    assert state["versions"] == {
        "trainwell": trainwell.__version__,
        "torch": str(torch.__version__),
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("saved", "named"),
    [
        ({"trainwell": "0.0.1", "torch": "1.13.0"}, ["trainwell 0.0.1", "torch 1.13.0"]),
        ({"trainwell": trainwell.__version__, "torch": "2.0.1"}, ["torch 2.0.1"]),
        ({"trainwell": "9.9.9", "torch": str(torch.__version__)}, ["trainwell 9.9.9"]),
    ],
)
def test_a_version_difference_is_one_line_and_the_resume_goes_on(cli, run, saved, named):
    rewrite(run / "checkpoints" / "last.pt", versions=saved)
    rewrite(run / "checkpoints" / "best.pt", versions=saved)
    code, out, err = resume(cli, run, "--resume", "auto")
    assert code == 0, err
    lines = [line for line in out.splitlines() if "was written by" in line]
    assert len(lines) == 1
    for text in named:
        assert text in lines[0]
    if "trainwell 0.0.1" not in named and saved["trainwell"] == trainwell.__version__:
        assert "trainwell" not in lines[0].split("(")[0]  # only what differs is named
    assert f"torch {torch.__version__}" in lines[0] or "torch" not in str(named)
    assert read_summary(run)["status"] == "completed" and read_summary(run)["steps"] == 28


@pytest.mark.slow
@pytest.mark.parametrize("versions", ["same", "absent"])
def test_same_or_unrecorded_versions_say_nothing(cli, run, versions):
    if versions == "absent":  # a checkpoint from before versions were recorded
        rewrite(run / "checkpoints" / "last.pt", versions=None, format=None)
    code, out, err = resume(cli, run, "--resume", "auto")
    assert code == 0, err
    assert "was written by" not in out and "resuming from" in out


@pytest.mark.slow
@pytest.mark.parametrize("where", ["auto", "path"])
def test_a_newer_checkpoint_format_is_refused_not_skipped(cli, run, where):
    last = run / "checkpoints" / "last.pt"
    rewrite(last, format=ckpt.FORMAT + 1, versions={"trainwell": "7.0", "torch": "9.0"})
    before = {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()}
    code, out, err = resume(cli, run, "--resume", "auto" if where == "auto" else str(last))
    assert code == 2
    line = err.strip()
    assert len(line.splitlines()) == 1
    assert f"is in checkpoint format {ckpt.FORMAT + 1} (written by trainwell 7.0)" in line
    assert "upgrade trainwell" in line and "skipping" not in out
    assert {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()} == before


def test_every_reader_refuses_a_newer_format(run):
    last = run / "checkpoints" / "last.pt"
    rewrite(last, format=ckpt.FORMAT + 5)
    with pytest.raises(TooNew, match="checkpoint format"):
        load_checkpoint(last)


@pytest.mark.parametrize("bad", ["2", 1.0, True])
def test_a_format_that_is_not_an_integer_is_malformed(run, bad):
    last = run / "checkpoints" / "last.pt"
    rewrite(last, format=bad)
    with pytest.raises(trainwell.UserError, match="'format' is"):
        load_checkpoint(last)
