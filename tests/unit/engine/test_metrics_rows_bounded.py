"""metrics.csv is written at every log point (``tail -f`` shows a running epoch), and the
engine keeps only the rows since the last log point in memory, not every row of the run:
counted, not timed."""

from __future__ import annotations

import csv
import gc
import tracemalloc

import pytest

import trainwell
from trainwell.config import load_config
from trainwell.engine.run_dir.directory import RunDir
from trainwell.engine.run_dir.metric_rows import MetricRows


def _cfg(run_dir, steps: int, *extra: str):
    return load_config(overrides=[
        "data.name=synthetic", f"data.kwargs.num_samples={steps * 9 + 40}",
        "data.kwargs.shape=[4]", "data.batch_size=8", "model.name=mlp",
        "model.kwargs.hidden=[4]", f"train.max_steps={steps}", "train.epochs=1",
        f"run.dir={run_dir}", "doctor.enabled=false", "train.precision=fp32", *extra,
    ])  # fmt: skip


def _file_rows(run_dir) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _tail_rows(run_dir) -> list[dict]:
    """The last rows of metrics.csv, read as ``tail -f`` would (not the whole file)."""
    path = run_dir / "metrics.csv"
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 4096))
        lines = f.read().decode().splitlines()[1:]  # the first may be cut
    fields = ["step", "epoch", "split", "name", "value"]
    return [dict(zip(fields, line.split(","))) for line in lines if line.count(",") == 4]


def _the_run(path) -> RunDir:
    (found,) = [o for o in gc.get_objects() if type(o) is RunDir and o.path == path]
    return found


def _held(run: RunDir) -> int:
    """Rows the run directory object holds: every list among its attributes and its
    recorder's, whatever they are called."""
    total = 0
    for owner in (run, run.rows):
        for value in vars(owner).values():
            if isinstance(value, (list, tuple)):
                total += len(value)
    return total


class FileWatch:
    """At every log point, metrics.csv already holds that step's training loss; after
    every evaluation, its validation loss."""

    def __init__(self, log_every: int) -> None:
        self.log_every, self.checked, self.held = log_every, [], []
        self.run: RunDir | None = None  # found once: a heap walk per step would be slow

    def on_step_end(self, ctx) -> None:
        if ctx.step % self.log_every:
            return
        rows = _tail_rows(ctx.run_dir)
        assert any(r["step"] == str(ctx.step) and r["name"] == "loss" for r in rows), ctx.step
        self.checked.append(ctx.step)
        self.run = self.run or _the_run(ctx.run_dir)
        self.held.append(_held(self.run))

    def on_eval_end(self, ctx) -> None:
        rows = _tail_rows(ctx.run_dir)
        assert any(r["step"] == str(ctx.step) and r["split"] == "val" for r in rows), ctx.step


@pytest.mark.slow
@pytest.mark.parametrize(("log_every", "steps", "extra"), [
    (1, 12, []), (3, 20, []), (7, 30, ["train.grad_accum_steps=2"]), (5, 25, ["train.epochs=2"]),
])  # fmt: skip
def test_each_log_point_is_in_metrics_csv_at_once(tmp_path, log_every, steps, extra):
    watch = FileWatch(log_every)
    cfg = _cfg(tmp_path / "run", steps, f"train.log_every={log_every}", *extra)
    if "train.epochs=2" in extra:  # two epochs: max_steps spans both
        cfg = _cfg(tmp_path / "run", steps, f"train.log_every={log_every}", "train.epochs=2",
                   f"data.kwargs.num_samples={steps * 5}")  # fmt: skip
    trainwell.fit(cfg, callbacks=[watch])
    assert watch.checked == list(range(log_every, steps + 1, log_every))
    # Nothing piles up between log points: after each, no row is held.
    assert max(watch.held) == 0, watch.held


@pytest.mark.slow
@pytest.mark.parametrize("steps", [40, 300])
def test_rows_held_in_memory_do_not_grow_with_the_run(tmp_path, steps):
    watch = FileWatch(1)
    result = trainwell.fit(_cfg(tmp_path / "run", steps, "train.log_every=1"), callbacks=[watch])
    assert max(watch.held) == 0
    rows = _file_rows(result.run_dir)
    assert len({r["step"] for r in rows if r["name"] == "loss" and r["split"] == "train"}) == steps
    assert (result.run_dir / "curves.png").stat().st_size > 0  # drawn from the file


@pytest.mark.slow
def test_memory_of_the_recorder_per_step_is_flat(tmp_path):
    """tracemalloc's bytes still allocated by the row recording code, at step 100 and at
    step 1100: the 1000 steps between add (almost) nothing (it was ~0.4 KB a step, 400 KB
    here). The bound is not zero: the interpreter keeps freed tuples, dicts and buffers
    on free lists, counted as allocated where they were first made (``open`` in
    metric_rows.py); those lists are bounded (about 15 KB measured), the rows were not."""
    marks: dict[int, int] = {}

    class Mark:
        def on_step_end(self, ctx) -> None:
            if ctx.step in (100, 1100):
                gc.collect()
                snap = tracemalloc.take_snapshot()
                marks[ctx.step] = sum(
                    s.size for s in snap.statistics("filename")
                    if s.traceback[0].filename.endswith(("rundir.py", "metric_rows.py"))
                )  # fmt: skip

    tracemalloc.start()
    try:
        trainwell.fit(_cfg(tmp_path / "run", 1100, "train.log_every=1"), callbacks=[Mark()])
    finally:
        tracemalloc.stop()
    assert marks[1100] - marks[100] < 32 * 1000, marks  # < 32 B a step; rows kept: 400 B


@pytest.mark.slow
def test_the_recorder_counts_everything_and_iterates_the_file(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,epoch,split,name,value\n")
    rows = MetricRows(path)
    for step in range(1, 101):
        rows.append((step, 0, "train", "loss", 1.0 / step))
        if step % 10 == 0:
            rows.flush()
            assert rows.held == 0
    rows.append((101, 0, "val", "loss", 0.5))
    assert len(rows) == 101 and rows.held == 1
    listed = list(rows)
    assert [r[0] for r in listed] == list(range(1, 102)) and listed[-1][2] == "val"
    assert len(path.read_text().splitlines()) == 101  # header + 100 flushed


@pytest.mark.slow
def test_a_resumed_run_counts_the_rows_it_kept(tmp_path):
    """The checkpoint's row count (what an exact resume truncates metrics.csv to) is the
    run's rows, though they are no longer in memory."""
    import torch

    run_dir = tmp_path / "run"
    cfg = _cfg(run_dir, 30, "train.log_every=2", "checkpoint.every_steps=10")
    trainwell.fit(cfg)
    state = torch.load(run_dir / "checkpoints" / "step-20.pt", weights_only=True)
    rows = _file_rows(run_dir)
    kept = state["log_rows"]
    assert 0 < kept < len(rows)
    assert int(rows[kept - 1]["step"]) <= 20 < int(rows[kept]["step"])
