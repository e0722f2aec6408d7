"""metrics.csv deleted, emptied, cut short or full of garbage before a resume: every row
that still reads is kept, what was lost is one line, the file as found is kept beside it,
and the run goes on (no traceback, no history lost without a word)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import trainwell
from tests.conftest import REPO, SYNTHETIC, read_summary
from tests.finished_run import finished_run_fixture, run_copy_fixture
from trainwell.config import load_config
from trainwell.engine.checkpointing.checkpoint import load_checkpoint

RUN = [*SYNTHETIC, "train.epochs=2", "train.log_every=2", "checkpoint.every_steps=5"]
HEADER = "step,epoch,split,name,value"


finished = finished_run_fixture("metrics", RUN)


run = run_copy_fixture()


def counted(run: Path) -> int:
    return int(load_checkpoint(run / "checkpoints" / "last.pt")["log_rows"])


def resume(run: Path) -> str:
    console = Console(record=True, width=500)
    cfg = load_config(overrides=[*RUN, f"run.dir={run}", "train.epochs=3"])
    trainwell.fit(cfg, resume="auto", console=console)
    return console.export_text()


def warnings_in(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("warning: metrics.csv")]


def data_rows(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    assert lines[0] == HEADER
    return lines[1:]


def test_an_intact_file_says_nothing_and_keeps_every_counted_row(run):
    before = data_rows(run / "metrics.csv")[: counted(run)]
    said = resume(run)
    assert warnings_in(said) == []
    assert data_rows(run / "metrics.csv")[: len(before)] == before
    assert not (run / "metrics.csv.damaged").exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_deleted_or_empty_file_says_how_many_rows_were_lost(run, how):
    n = counted(run)
    if how == "deleted":
        (run / "metrics.csv").unlink()
    else:
        (run / "metrics.csv").write_bytes(b"")
    said = resume(run)
    (line,) = warnings_in(said)
    word = "missing" if how == "deleted" else "empty"
    assert f"metrics.csv was {word}: the {n} metric rows logged before the checkpoint" in line
    rows = data_rows(run / "metrics.csv")
    assert rows and all(int(r.split(",")[0]) >= 28 for r in rows)  # from the resume on
    assert read_summary(run)["status"] == "completed"


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.2, 0.5, 0.9])
def test_a_file_cut_short_keeps_its_whole_rows_and_the_original(run, fraction):
    path = run / "metrics.csv"
    original = path.read_bytes()
    cut = original[: int(len(original) * fraction)]
    path.write_bytes(cut)
    # The rows that still end in a newline (the last piece is "" or a torn row).
    whole = [line.decode().rstrip("\r") for line in cut.split(b"\n")[1:-1]]
    said = resume(run)
    (line,) = warnings_in(said)
    assert f"kept {len(whole)} of the {counted_from(original)} metric rows" in line
    assert "it no longer holds (cut short after step" in line
    assert (run / "metrics.csv.damaged").read_bytes() == cut
    assert data_rows(path)[: len(whole)] == whole


def counted_from(original: bytes) -> int:
    # The finished run's last checkpoint counts every row but the final test's.
    return len([r for r in original.decode().splitlines()[1:] if ",test," not in r])


@pytest.mark.slow
@pytest.mark.parametrize("bad_line", ["zz,yy,train,loss,nan?", "\x00\x01\x02", "1,2,3"])
def test_a_garbage_row_is_dropped_and_counted_the_rest_is_kept(run, bad_line):
    path = run / "metrics.csv"
    lines = path.read_text().split("\n")
    removed = lines[5]
    lines[5] = bad_line
    path.write_text("\n".join(lines))
    said = resume(run)
    (line,) = warnings_in(said)
    assert "lost 1 unreadable row;" in line and "cut short" not in line
    rows = data_rows(path)
    assert removed not in rows[:10] and lines[6] == rows[4]


@pytest.mark.slow
def test_garbage_bytes_on_the_command_line_are_one_warning_not_a_traceback(run, tmp_path):
    (run / "metrics.csv").write_bytes(os.urandom(3000))
    proc = subprocess.run(
        [sys.executable, "-m", "trainwell", "train", *RUN, f"run.dir={run}", "train.epochs=3",
         "--resume", "auto"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "warning: metrics.csv was damaged: kept 0 of the" in proc.stdout
    assert len((run / "metrics.csv.damaged").read_bytes()) == 3000
    assert read_summary(run)["status"] == "completed"
