"""The run directory on its own: metrics.csv rows, reopening, the summary, the lock."""

from __future__ import annotations

import csv
import json
import os

import pytest

from trainwell.engine.run_dir.directory import CsvLogger, NullRunDir, RunDir
from trainwell.engine.run_dir.metric_rows import MetricRows, read_rows
from trainwell.engine.run_dir.run_lock import RunLock
from trainwell.errors import UserError

HEADER = ["step", "epoch", "split", "name", "value"]


def _file_rows(run):
    with open(run.metrics_path, newline="") as f:
        return list(csv.reader(f))


def _log_some(run, steps):
    for step in steps:
        run.log(step, step // 4, "train", "loss", 1.0 / step)
        run.log(step, step // 4, "train", "lr", 0.5**step)


def test_create_makes_the_layout_with_a_header_only(tmp_path):
    run = RunDir.create(tmp_path / "a" / "run")
    assert run.checkpoints.is_dir()
    assert _file_rows(run) == [HEADER]
    assert len(run.rows) == 0 and not run.rows


def test_rows_reach_the_file_on_flush_in_the_order_logged(tmp_path):
    run = RunDir.create(tmp_path / "run")
    _log_some(run, [1, 2])
    assert _file_rows(run) == [HEADER]  # nothing before the flush
    assert len(run.rows) == 4 and run.rows.held == 4
    run.flush()
    _log_some(run, [3])
    run.flush()
    expected = [(s, s // 4, "train", n, v) for s in (1, 2, 3)
                for n, v in (("loss", 1.0 / s), ("lr", 0.5**s))]  # fmt: skip
    assert list(read_rows(run.metrics_path)) == expected
    assert list(run.rows) == expected and run.rows.held == 0 and len(run.rows) == 6


def test_iterating_the_rows_reads_the_file_then_the_pending_ones(tmp_path):
    run = RunDir.create(tmp_path / "run")
    run.log(1, 0, "train", "loss", 0.5)
    run.flush()
    run.log(2, 0, "val", "loss", 0.25)
    assert list(run.rows) == [(1, 0, "train", "loss", 0.5), (2, 0, "val", "loss", 0.25)]


def test_a_flush_with_nothing_pending_writes_nothing(tmp_path):
    run = RunDir.create(tmp_path / "run")
    before = run.metrics_path.stat().st_mtime_ns, run.metrics_path.read_bytes()
    run.flush()
    assert (run.metrics_path.stat().st_mtime_ns, run.metrics_path.read_bytes()) == before


def test_the_csv_logger_splits_names_into_split_and_name(tmp_path):
    run = RunDir.create(tmp_path / "run")
    epoch = [3]
    logger = CsvLogger(run, epoch=lambda: epoch[0])
    logger.log_metrics(12, {"train/loss": 0.5, "train/mem/rss_mb": 100.0, "val/acc": 1})
    # Written at once (each log point reaches the file), in the order given.
    assert _file_rows(run)[1:] == [["12", "3", "train", "loss", "0.5"],
                                   ["12", "3", "train", "mem/rss_mb", "100.0"],
                                   ["12", "3", "val", "acc", "1.0"]]  # fmt: skip


@pytest.mark.parametrize("keep", [0, 1, 3, 6])
def test_reopen_keeps_the_first_rows_and_drops_the_rest(tmp_path, keep):
    run = RunDir.create(tmp_path / "run")
    _log_some(run, [1, 2, 3])
    run.flush()
    written = list(read_rows(run.metrics_path))
    again = RunDir.reopen(tmp_path / "run", keep_rows=keep)
    assert list(read_rows(again.metrics_path)) == written[:keep]
    assert len(again.rows) == keep and again.notes == []
    assert _file_rows(again)[0] == HEADER
    assert not (tmp_path / "run" / ".metrics.csv.tmp").exists()
    # New rows follow the kept ones.
    again.log(9, 2, "train", "loss", 0.125)
    again.flush()
    assert list(read_rows(again.metrics_path)) == [*written[:keep], (9, 2, "train", "loss", 0.125)]


def test_reopen_of_a_damaged_file_keeps_what_reads_and_says_so(tmp_path):
    run = RunDir.create(tmp_path / "run")
    _log_some(run, [1])
    run.flush()
    with open(run.metrics_path, "a") as f:
        f.write("2,0,train,lo")  # a crash cut the row short
    again = RunDir.reopen(tmp_path / "run", keep_rows=3)
    assert list(read_rows(again.metrics_path)) == [(1, 0, "train", "loss", 1.0),
                                                   (1, 0, "train", "lr", 0.5)]  # fmt: skip
    assert len(again.rows) == 2
    assert len(again.notes) == 1 and again.notes[0].startswith("metrics.csv was damaged")


def test_reopen_of_a_deleted_file_starts_it_again_with_a_note(tmp_path):
    run = RunDir.create(tmp_path / "run")
    run.metrics_path.unlink()
    again = RunDir.reopen(tmp_path / "run", keep_rows=4)
    assert _file_rows(again) == [HEADER] and len(again.rows) == 0
    assert again.notes


@pytest.mark.parametrize("summary", [
    {"status": "running", "step": 3},
    {"status": "completed", "metrics": {"val/loss": 0.25}, "nested": [1, 2, {"a": None}]},
])  # fmt: skip
def test_write_summary_reads_back_equal_and_leaves_no_temporary_file(tmp_path, summary):
    run = RunDir.create(tmp_path / "run")
    run.write_summary(summary)
    assert json.loads(run.summary_path.read_text()) == summary
    assert sorted(p.name for p in run.path.iterdir()) == ["checkpoints", "metrics.csv",
                                                          "summary.json"]  # fmt: skip
    run.write_summary({"status": "failed"})  # over the old one
    assert json.loads(run.summary_path.read_text()) == {"status": "failed"}


def test_a_summary_that_cannot_be_written_is_one_line_and_leaves_the_old_one(tmp_path):
    run = RunDir.create(tmp_path / "run")
    run.write_summary({"status": "running"})
    # A folder in the temporary file's place: the write fails (as root too).
    (run.path / ".summary.json.tmp").mkdir()
    with pytest.raises(UserError, match=r"could not write .*summary\.json: .*\(EISDIR\)"):
        run.write_summary({"status": "completed"})
    assert json.loads(run.summary_path.read_text()) == {"status": "running"}


@pytest.mark.parametrize(("status", "article"), [("completed", "a"), ("running", "a"),
                                                 ("interrupted", "an")])  # fmt: skip
def test_create_refuses_a_folder_that_holds_a_run(tmp_path, status, article):
    run = RunDir.create(tmp_path / "run")
    run.write_summary({"status": status})
    with pytest.raises(UserError, match=f"already holds {article} {status} run"):
        RunDir.create(tmp_path / "run")


def test_create_reuses_an_empty_folder_and_refuses_a_file(tmp_path):
    (tmp_path / "empty").mkdir()
    assert RunDir.create(tmp_path / "empty").checkpoints.is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="exists and is not a directory"):
        RunDir.create(tmp_path / "file")
    (tmp_path / "garbled").mkdir()
    (tmp_path / "garbled" / "summary.json").write_text("{not json")
    with pytest.raises(UserError, match="already holds an unreadable run"):
        RunDir.create(tmp_path / "garbled")


def test_create_refuses_a_dangling_link(tmp_path):
    os.symlink(tmp_path / "gone", tmp_path / "link")
    with pytest.raises(UserError, match="is a symbolic link to .*gone, which does not exist"):
        RunDir.create(tmp_path / "link")


def test_a_second_lock_on_the_same_folder_is_refused_until_released(tmp_path):
    run = RunDir.create(tmp_path / "run")
    first = RunLock.acquire(run.path)
    assert (run.path / ".lock").read_text() == str(os.getpid())
    with pytest.raises(
        UserError, match=rf"is in use by another trainwell process \(pid {os.getpid()}\)"
    ):
        RunLock.acquire(run.path)
    assert RunLock.try_acquire(run.path) is None
    first.release()
    second = RunLock.try_acquire(run.path)
    assert second is not None
    second.release()


def test_the_null_run_dir_writes_nothing(tmp_path):
    null = NullRunDir(tmp_path / "run")
    null.log(1, 0, "train", "loss", 0.5)
    null.flush()
    null.write_summary({"status": "running"})
    assert not (tmp_path / "run").exists()


def test_metric_rows_count_what_was_kept_before(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,epoch,split,name,value\n1,0,train,loss,0.5\n2,0,train,loss,0.25\n")
    rows = MetricRows(path, count=1)  # a resume kept one row of the two
    assert list(rows) == [(1, 0, "train", "loss", 0.5)]
    rows.append((3, 0, "train", "loss", 0.125))
    assert len(rows) == 2 and list(rows)[-1] == (3, 0, "train", "loss", 0.125)
