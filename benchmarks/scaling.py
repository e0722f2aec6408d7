"""Training throughput on 1 and 2 processes of this CPU, side by side (data parallelism).

What is measured
----------------
Training samples per second of ``trainwell train``, read from each run's
``summary.json`` (``samples_per_s``: the optimizer steps' samples over ``train_time_s``,
rank 0's clock around the training steps only; setup, evaluation, checkpoints and the
launcher's start-up fall outside it). ``data.batch_size`` is the *global* batch per
optimizer step, so every row trains the very same thing: the same number of steps of
the same global batch; on 2 processes each takes half of every batch and DDP (gloo on
the CPU) all-reduces the gradients every step.

Each workload is run four ways, every one a real command in a fresh process:

- **launcher, 1 process x T threads**: ``python -m trainwell train --nproc 1 ...``, the
  single-process side, through the same launcher (torch.distributed.run) as 2 processes
  (one worker: world size 1, no DDP);
- **launcher, 2 processes x T threads**: ``python -m trainwell train --nproc 2 ...``;
- **in-process, 1 process x T threads**: ``python -m trainwell train ...`` (no launcher);
- **launcher, 1 process x 2T threads**: as many cores as 2 processes use, but as
  intra-op threads of one process: do processes beat threads here?

and a fifth, diagnostic row, **launcher, 1 process x T threads, half batch**: half the
global batch on one process, the compute of one process's share on 2 (not the same
training, so it gets no ratio).

The thread count is set explicitly for every row through the environment
(``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS``): the launcher would otherwise set 1 thread
per process only when it starts several, and the others would take every core. The
default T = 1 (``--threads``) gives 1 core to the 1-process side and 2 cores to the
2-process side. The ``thr`` column is what rank 0 really ran with
(``torch.get_num_threads()``, from the run's ``env.json``).

Workloads (``--workload``), all ``model.name=simple_cnn``, ``train.precision=fp32``:

- **digits** (the default workload): the built-in recipe, scikit-learn's 8x8 digits,
  global batch 64 (32 per process on 2), 380 steps (20 epochs of 19). A small model on tiny
  inputs: little compute per step, so the gradient all-reduce weighs a lot.
- **synthetic**: random 1x28x28 inputs (8192 samples), global batch 128, 30 steps. About
  ten times the compute per sample, where data parallelism can pay off.

The runs alternate (the order of the rows rotates each repeat) so that machine noise
hits them alike; the table gives the median samples/s of each row with its range, the
median time per optimizer step (``train_time_s / steps``), the median wall time of the
whole command (start-up, data, launcher, training, evaluation, checkpoints: what the
launcher costs shows here) and the ratio of medians to the 1-process launcher row.

Below each table, where the time of a 2-process step goes: half a 1-process step
(perfect scaling), one process's share alone (the half-batch row), the 2-process step,
and the cost of gloo all-reduces between 2 processes of T threads, timed alone (spawned
processes, median of many, a barrier before each): one of all the model's gradients (a
flat float32 tensor of that many elements; DDP does that every step, in buckets,
overlapped with the backward pass where it can be) and one of a single float (the
latency that any collective the loop runs every step adds).

The last line is the ratio for the default workload (digits when it ran; else the one
that ran)::

    ratio (2 processes / 1 process, samples/s): 1.62

How to run
----------
::

    python benchmarks/scaling.py                        # both workloads, 5 repeats: ~10 min
    python benchmarks/scaling.py --workload digits      # the default workload only
    python benchmarks/scaling.py --quick                # a smoke run (30-50 s): digits
    python benchmarks/scaling.py --repeats 9 --threads 1

Each 2-process launch costs several seconds of start-up here (two interpreters importing
torch, the rendezvous), hence the wall column. Run directories go to a temporary folder
that is removed afterwards, and so does what the commands leave in their own temporary
folder (``TMPDIR`` points into it: the launcher leaves a ``torchelastic_*`` folder behind
on every launch). Speed is measured here, never asserted.

Run it on an otherwise idle machine: the 2-process and 2-thread rows need both cores at
every step (the ranks wait for each other at every collective, OpenMP threads at every
op), so other work slows them far more than the 1-thread rows. The load average is
printed before and after, and the (min - max) column shows the spread.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from trainwell.report.outcome import scaling_verdict

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    overrides: tuple[str, ...]  # without the batch size and the length of the run
    batch_size: int
    full_length: tuple[str, ...]
    quick_length: tuple[str, ...]
    input_shape: tuple[int, ...]


WORKLOADS = {
    "digits": Workload(
        "digits",
        "simple_cnn on the 8x8 digits, global batch 64",
        ("data.name=digits", "model.name=simple_cnn"),
        64,
        ("train.epochs=20", "train.max_steps=380"),
        ("train.epochs=2", "train.max_steps=38"),
        (1, 8, 8),
    ),
    "synthetic": Workload(
        "synthetic",
        "simple_cnn on synthetic 1x28x28 inputs (8192 samples), global batch 128",
        (
            "data.name=synthetic",
            "data.kwargs.num_samples=8192",
            "data.kwargs.shape=[1,28,28]",
            "model.name=simple_cnn",
        ),
        128,
        ("train.epochs=1", "train.max_steps=30"),
        ("train.epochs=1", "train.max_steps=6"),
        (1, 28, 28),
    ),
}
DEFAULT_WORKLOAD = "digits"
COMMON = ("train.precision=fp32", "run.device=cpu", "data.num_workers=0", "run.seed=0")


@dataclass(frozen=True)
class Row:
    label: str
    nproc: int | None  # None: in-process, no launcher
    threads: int
    half_batch: bool = False  # the diagnostic row: the compute of one 2-process share

    @property
    def procs(self) -> int:
        return self.nproc or 1


@dataclass
class Result:
    samples_per_s: float
    train_time_s: float
    steps: int
    wall_s: float
    threads_seen: int | None


def rows_for(threads: int, quick: bool = False) -> list[Row]:
    """The rows; the first is the reference, the second the 2-process side, the last a
    diagnostic (half the global batch: not the same training). A quick run leaves out the
    1-process row on twice the threads: each launch is a torchrun start, several seconds."""
    t, t2 = threads, 2 * threads

    def thr(n: int) -> str:
        return f"{n} thread" + ("s" if n > 1 else "")

    rows = [
        Row(f"launcher, 1 process x {thr(t)}", 1, t),
        Row(f"launcher, 2 processes x {thr(t)}", 2, t),
        Row(f"in-process, 1 process x {thr(t)}", None, t),
        Row(f"launcher, 1 process x {thr(t2)}", 1, t2),
        Row(f"launcher, 1 process x {thr(t)}, half batch*", 1, t, half_batch=True),
    ]
    return [row for row in rows if not (quick and row.threads == t2)]


def train_once(row: Row, work: Workload, quick: bool, run_dir: Path) -> Result:
    """One ``python -m trainwell train`` command; its numbers from the run directory."""
    batch = work.batch_size // 2 if row.half_batch else work.batch_size
    length = work.quick_length if quick else work.full_length
    cmd = [sys.executable, "-m", "trainwell", "train"]
    if row.nproc is not None:
        cmd += ["--nproc", str(row.nproc)]
    cmd += [f"run.dir={run_dir}", *work.overrides, f"data.batch_size={batch}", *length, *COMMON]
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(row.threads)
    env.pop("WORLD_SIZE", None)  # never join a group this script may itself run under
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary.get("status") != "completed" or not summary.get("samples_per_s"):
        raise SystemExit(f"{run_dir}: unexpected summary: {summary}")
    if summary.get("world_size") != row.procs:
        raise SystemExit(f"{run_dir}: world_size {summary.get('world_size')}, not {row.procs}")
    threads_seen = None
    env_json = run_dir / "env.json"
    if env_json.exists():
        threads_seen = json.loads(env_json.read_text()).get("cpu", {}).get("torch_threads")
    return Result(
        float(summary["samples_per_s"]),
        float(summary["train_time_s"]),
        int(summary["steps"]),
        wall,
        threads_seen,
    )


# ---- the gloo all-reduce alone -----------------------------------------------------------


def _allreduce_worker(
    rank: int, world: int, store: str, sizes: list[int], iters: int, threads: int, out: str
) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        medians = []
        for numel in sizes:
            buf = torch.randn(numel)
            times = []
            for i in range(iters + 10):  # 10 warm-up rounds
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(buf)
                if i >= 10:
                    times.append(time.perf_counter() - t0)
            medians.append(statistics.median(times))
        if rank == 0:
            Path(out).write_text(json.dumps(medians))
    finally:
        dist.destroy_process_group()


def allreduce_ms(sizes: list[int], iters: int, threads: int, tmp: Path) -> list[float]:
    """Median time (ms) of one gloo all-reduce of each size (float32 elements) between 2
    processes of ``threads`` threads, each after a barrier."""
    import torch.multiprocessing as mp

    store, out = tmp / "allreduce.store", tmp / "allreduce.json"
    store.unlink(missing_ok=True)
    mp.start_processes(
        _allreduce_worker,
        args=(2, str(store), sizes, iters, threads, str(out)),
        nprocs=2,
        start_method="spawn",
    )
    return [1000 * t for t in json.loads(out.read_text())]


def num_params(shape: tuple[int, ...]) -> int:
    from trainwell.config import ModelConfig
    from trainwell.models import build_model

    model = build_model(ModelConfig(name="simple_cnn"), 10, shape)
    return sum(p.numel() for p in model.parameters())


# ---- the benchmark -----------------------------------------------------------------------


def run_workload(
    work: Workload, rows: list[Row], repeats: int, quick: bool, tmp: Path
) -> dict[Row, list[Result]]:
    results: dict[Row, list[Result]] = {row: [] for row in rows}
    n = 0
    for rep in range(repeats):
        shift = rep % len(rows)
        for row in rows[shift:] + rows[:shift]:  # rotated each repeat
            n += 1
            run_dir = tmp / f"{work.name}-{n}"
            try:
                results[row].append(train_once(row, work, quick, run_dir))
            finally:
                shutil.rmtree(run_dir, ignore_errors=True)
            print(
                f"  [{work.name} {rep + 1}/{repeats}] {row.label}: "
                f"{results[row][-1].samples_per_s:,.0f} samples/s",
                flush=True,
            )
    return results


def step_ms(results: list[Result]) -> float:
    """Median time of one optimizer step (ms)."""
    return statistics.median(1000 * r.train_time_s / r.steps for r in results)


def print_table(
    work: Workload, rows: list[Row], results: dict[Row, list[Result]], repeats: int
) -> float:
    """The table of one workload; returns its 2-process / 1-process ratio of medians."""
    med = {row: statistics.median(r.samples_per_s for r in results[row]) for row in rows}
    ref = med[rows[0]]
    first = results[rows[0]][0]
    print()
    print(
        f"workload {work.name}: {work.description}, {first.steps} steps per run, fp32; "
        f"{repeats} repeat{'s' if repeats > 1 else ''}, medians"
    )
    head = (
        f"{'row':<45} {'procs':>5} {'thr':>3}  {'samples/s':>9}  {'(min - max)':<19} "
        f"{'ms/step':>7} {'train s':>7} {'wall s':>6}  {'vs row 1':>8}"
    )
    print(head)
    print("-" * len(head))
    for row in rows:
        rs = results[row]
        seen = {r.threads_seen for r in rs}
        thr = str(seen.pop()) if len(seen) == 1 and None not in seen else "?"
        lo, hi = min(r.samples_per_s for r in rs), max(r.samples_per_s for r in rs)
        train_s = statistics.median(r.train_time_s for r in rs)
        wall_s = statistics.median(r.wall_s for r in rs)
        spread = f"({lo:,.0f} - {hi:,.0f})"
        versus = "-" if row.half_batch else f"{med[row] / ref:.2f}"
        print(
            f"{row.label:<45} {row.procs:>5} {thr:>3}  {med[row]:>9,.0f}  {spread:<19} "
            f"{step_ms(rs):>7.2f} {train_s:>7.2f} {wall_s:>6.1f}  {versus:>8}"
        )
    half = next((row for row in rows if row.half_batch), None)
    if half is not None:
        print(
            f"* global batch {work.batch_size // 2}, the share of one process on 2: "
            "not the same training, only the compute of one share (no ratio)"
        )
    return med[rows[1]] / ref


def explain_step(
    work: Workload,
    rows: list[Row],
    results: dict[Row, list[Result]],
    ar: list[float] | None,
    numel: int,
) -> None:
    """Where the time of a 2-process step goes, next to perfect scaling."""
    one, two = step_ms(results[rows[0]]), step_ms(results[rows[1]])
    print(f"where a 2-process step goes ({work.name}, medians):")
    print(f"  perfect scaling, half a 1-process step           {one / 2:7.2f} ms")
    half = next((row for row in rows if row.half_batch), None)
    if half is not None:
        share = step_ms(results[half])
        print(f"  1 process on half the batch (one share)          {share:7.2f} ms")
    print(f"  2 processes (the table's 2-process row)          {two:7.2f} ms")
    if half is not None:
        print(
            f"  one share over perfect scaling: {share - one / 2:+.2f} ms (per-step costs that "
            "do not shrink with the batch: optimizer step, clipping, per-op overhead)"
        )
        print(
            f"  2 processes over one share:     {two - share:+.2f} ms (DDP and gloo "
            "communication, waiting for the slower rank, 2 processes sharing the machine)"
        )
    if ar is not None:
        grads, tiny = ar
        print(
            f"  gloo all-reduce alone, 2 processes x {rows[1].threads} thread: the gradients "
            f"({numel:,} float32, {4 * numel / 1e6:.2f} MB) {grads:.2f} ms; "
            f"1 float (latency of any per-step collective) {tiny:.2f} ms"
        )


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Training samples/s of trainwell on 1 and 2 processes of this CPU."
    )
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=None,
        help="runs of every row per workload (default 5; 1 with --quick)",
    )
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="intra-op threads per process (default 1)"
    )
    parser.add_argument(
        "--workload",
        choices=[*WORKLOADS, "all"],
        default=None,
        help="default: all (digits with --quick)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short runs, 1 repeat, digits only, no 2-thread row: a smoke test",
    )
    parser.add_argument(
        "--no-allreduce", action="store_true", help="skip timing the gloo all-reduce alone"
    )
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 5)
    choice = args.workload or (DEFAULT_WORKLOAD if args.quick else "all")
    names = list(WORKLOADS) if choice == "all" else [choice]
    rows = rows_for(args.threads, args.quick)

    import torch

    cpu = platform.processor() or platform.machine()
    print(
        f"trainwell scaling benchmark: {os.cpu_count()} logical CPUs ({cpu}), "
        f"torch {torch.__version__}, gloo"
    )
    t2 = 2 * args.threads  # the row on twice the threads, where rows_for kept it
    doubled = f", {t2} in the 1 process x {t2} threads row" if any(
        row.threads == t2 for row in rows) else ""  # fmt: skip
    print(
        f"threads: OMP_NUM_THREADS=MKL_NUM_THREADS set per row in each command's "
        f"environment: {args.threads} per process (1-process and 2-process rows){doubled}"
    )
    with contextlib.suppress(OSError):
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"load average before: {load} (other work on the machine skews the numbers)")

    ratios: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="trainwell-scaling-"))
    # What the commands leave in the temporary folder (the launcher's torchelastic_* log
    # folders, torch's caches) goes into ours, and goes with it.
    (tmp / "tmp").mkdir()
    os.environ["TMPDIR"] = str(tmp / "tmp")
    try:
        for name in names:
            work = WORKLOADS[name]
            results = run_workload(work, rows, repeats, args.quick, tmp)
            ratios[name] = print_table(work, rows, results, repeats)
            numel = num_params(work.input_shape)
            ar = None
            if not args.no_allreduce:
                iters = 50 if args.quick else 300
                ar = allreduce_ms([numel, 1], iters, args.threads, tmp)
            explain_step(work, rows, results, ar, numel)
            if len(names) > 1:
                print(f"ratio for {name} (2 processes / 1 process, samples/s): {ratios[name]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    with contextlib.suppress(OSError):
        print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    main_name = DEFAULT_WORKLOAD if DEFAULT_WORKLOAD in ratios else names[0]
    print()
    print(f"workload of the ratio below: {main_name}")
    print(scaling_verdict(ratios[main_name]))  # trainwell.report.outcome's, as runs --diff
    print(f"ratio (2 processes / 1 process, samples/s): {ratios[main_name]:.2f}")

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
