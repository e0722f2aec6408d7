"""What ``--resume`` says: a run directory given as PATH, a run.dir that is a dangling
symbolic link, a summary that cannot be read, and a run that another process holds
(refused before any word about its checkpoints)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, SYNTHETIC, read_summary
from tests.finished_run import finished_run_fixture, run_copy_fixture

RUN = [*SYNTHETIC, "train.epochs=2", "checkpoint.every_steps=5"]


finished = finished_run_fixture("wording", RUN)


run = run_copy_fixture()


@pytest.mark.slow
@pytest.mark.parametrize("given", ["run", "run/checkpoints", "run/"])
def test_resume_a_run_directory_takes_its_newest_checkpoint(cli, run, given):
    code, out, err = cli("train", *RUN, "train.epochs=3", "--resume", given)
    assert code == 0, err
    assert "torn" not in out + err and "commit marker" not in out + err
    assert "resuming from run/checkpoints/last.pt at step 28" in out
    assert read_summary(run)["steps"] == 42  # continued in that run's own folder


@pytest.mark.slow
def test_resume_a_run_directory_skips_a_torn_newest_one(cli, run):
    last = run / "checkpoints" / "last.pt"
    last.write_bytes(last.read_bytes()[:300])
    code, out, err = cli("train", *RUN, "train.epochs=3", "--resume", "run")
    assert code == 0, err
    assert "skipping unusable checkpoint" in out and "best.pt at step 28" in out


def test_a_run_directory_without_checkpoints_is_one_clear_line(cli, tmp_path):
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    code, out, err = cli("train", *RUN, "--resume", "empty")
    assert code == 2
    expected = "--resume empty: the run directory holds no checkpoint to resume"
    assert err.strip() == f"trainwell: error: {expected}"


def test_a_folder_that_is_no_checkpoint_and_no_run_says_so(cli, tmp_path):
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "notes.txt").write_text("hello")
    code, out, err = cli("train", *RUN, "run.dir=b", "--resume", "stuff")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "is a folder, not a checkpoint" in err and "commit marker" not in err


@pytest.mark.parametrize("resume", [None, "auto"])
def test_a_dangling_symlink_run_dir_is_named_as_such(cli, tmp_path, resume):
    (tmp_path / "link").symlink_to(tmp_path / "gone" / "away")
    code, out, err = cli("train", *RUN, "run.dir=link", *(["--resume", resume] if resume else []))
    assert code == 2
    line = err.strip()
    assert len(line.splitlines()) == 1
    assert "is a symbolic link to" in line and str(tmp_path / "gone" / "away") in line
    assert "File exists" not in line and "starting from scratch" not in out
    assert not (tmp_path / "gone").exists()


@pytest.mark.parametrize("content", ["{not json", "", "[1, 2]"])
def test_a_run_whose_summary_cannot_be_read_is_an_unreadable_run(cli, tmp_path, content):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "summary.json").write_text(content)
    code, out, err = cli("train", *RUN, "run.dir=r")
    assert code == 2
    assert "already holds an unreadable run" in err and "a unreadable" not in err


def hold_lock(folder: Path) -> subprocess.Popen:
    """Another process holding ``folder``'s run lock, as a live run does."""
    code = ("import sys, time; from pathlib import Path; from "
            "trainwell.engine.run_dir.run_lock import "
            "RunLock; lock = RunLock.acquire(Path(sys.argv[1])); print('held', flush=True); "
            "time.sleep(120)")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("how", ["auto", "run_dir", "checkpoint", "auto_with_a_torn_newest"])
def test_a_held_run_is_refused_before_any_word_about_resuming(cli, run, how):
    if how == "auto_with_a_torn_newest":
        (run / "checkpoints" / "last.pt").write_bytes(b"torn")
    args = {
        "auto": ["run.dir=run", "--resume", "auto"],
        "auto_with_a_torn_newest": ["run.dir=run", "--resume", "auto"],
        "run_dir": ["--resume", "run"],
        "checkpoint": ["--resume", "run/checkpoints/last.pt"],
    }[how]
    before = (run / "summary.json").read_text(), (run / "metrics.csv").read_text()
    holder = hold_lock(run)
    try:
        code, out, err = cli("train", *RUN, "train.epochs=3", *args)
    finally:
        holder.kill()
        holder.wait()
    assert code == 2
    assert f"is in use by another trainwell process (pid {holder.pid})" in err
    assert "resuming from" not in out and "skipping" not in out and "config changed" not in out
    assert ((run / "summary.json").read_text(), (run / "metrics.csv").read_text()) == before


@pytest.mark.slow
def test_the_lock_check_leaves_no_lock_behind(cli, run):
    holder = hold_lock(run)
    holder.kill()
    holder.wait()
    time.sleep(0.05)
    code, out, err = cli("train", *RUN, "train.epochs=3", "run.dir=run", "--resume", "auto")
    assert code == 0, err
    assert "resuming from" in out
