"""What trainwell's durable checkpoint write costs, next to a plain ``torch.save``.

What is measured
----------------
The time to write one training checkpoint, three ways, of the very same state, into the
very same folder:

- **plain torch.save**: ``torch.save(state, path)``, what most hand-written loops do. It
  returns once the bytes are in the operating system's page cache; they reach the disk
  later, and a power cut before then loses them (or leaves half a file).
- **plain + fsync**: ``torch.save`` into an open file, then ``flush`` and ``os.fsync``:
  the bytes are on the disk when it returns, but the file is written in place, so a crash
  midway still leaves a partial file under the final name.
- **durable (save_atomic)**: ``trainwell.engine.checkpointing.checkpoint.save_atomic(state, path)``,
  what trainwell writes every checkpoint with: a temporary file in the same folder,
  ``torch.save`` into it, ``flush``, ``os.fsync``, ``os.replace`` onto the final name and
  an ``fsync`` of the folder. A crash at any instant leaves the old file or the new one.

The middle row shows where the durable write's extra time goes: nearly all of it is the
``fsync`` (the disk really writing the bytes), next to which the temporary file, the
rename and the folder's ``fsync`` are small.

The state is a realistic training checkpoint, shaped like the one trainwell's loop writes
(``Checkpointer.state_dict`` in ``trainwell/engine/checkpointing/checkpointer.py``): ``model``, the
state_dict of
a stack of six ``nn.Linear`` layers with about ``--size-mb`` megabytes (10**6 bytes) of
float32 parameters (100 MB: width 2048, about 25 M parameters), plus ``optimizer``,
``scheduler``, ``step``, ``epoch``, ``rng`` (trainwell's own ``rng_state()``), the resolved
default ``config``, ``metrics`` and ``versions``. Two states are timed:

- **weights**: ``optimizer`` is the state of plain SGD (parameter groups only, no
  per-parameter tensors): the file is the model's size. This row gives the headline ratio.
- **weights + AdamW**: ``optimizer`` is AdamW's state after one step (``exp_avg`` and
  ``exp_avg_sq`` for every parameter): three times the model's size, as in most real
  runs. Skipped with ``--no-adamw``.

How it is timed
---------------
Only the write call is timed (``time.perf_counter``, garbage collector off). Before every
timed write all dirty pages are flushed (``os.sync``, untimed), so that no write pays for
the disk traffic a previous one left behind; after it, the file is removed (untimed).
So every write, in every variant, creates a new file in an empty folder (the durable
write's ``os.replace`` is then a plain rename; replacing an existing ``last.pt``, as
training does, would add the freeing of the old file's blocks to it). A plain
``torch.save`` is thus timed up to the point where it returns: the disk writes it leaves
to the kernel come later, and are not counted.

One untimed warm-up write of each variant comes first; then the variants alternate, their
order rotated each repeat (plain, plus fsync, durable; then plus fsync, durable, plain;
...), so that machine noise hits them alike. The table gives the median and the minimum
of each, the write speed at the median, and the ratio of medians to the plain
``torch.save``; the last line is the durable / plain ratio for the **weights** state (the
project aims at 1.3 at most for a 100 MB model).

The folder
----------
Both sides write into one fresh temporary folder, removed at the end: under ``--dir``
when given, otherwise under the system's temporary folder (``tempfile.gettempdir()``),
unless that is in memory (tmpfs, ramfs), where ``fsync`` costs nothing and the ratio
would mean nothing; the current folder is then used instead. The folder, its filesystem
type and its device are printed, with a warning if they are in memory. The numbers
depend a great deal on the disk (a local NVMe drive, a virtual disk with a host-side
cache, a network filesystem): run it where your checkpoints go.

How to run
----------
::

    python benchmarks/checkpoint.py                  # 100 MB, 5 repeats: about 10-20 s
    python benchmarks/checkpoint.py --quick          # 10 MB, 2 repeats: a smoke run
    python benchmarks/checkpoint.py --size-mb 400 --repeats 9 --dir /data/checkpoints

The last line reads ``ratio (durable / plain torch.save): 1.07``. Speed is measured here,
never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import trainwell
from trainwell.config import load_config, to_dict
from trainwell.engine.checkpointing.checkpoint import save_atomic
from trainwell.engine.state.loop_state import rng_state

SEED = 0
LAYERS = 6
MB = 10**6
IN_MEMORY = {"tmpfs", "ramfs", "devtmpfs"}

PLAIN = "plain torch.save"
PLUS_FSYNC = "plain + fsync"
DURABLE = "durable (save_atomic)"
VARIANTS = (PLAIN, PLUS_FSYNC, DURABLE)

Writer = Callable[[dict[str, Any], Path], None]


# ---- the three ways to write --------------------------------------------------------------


def write_plain(state: dict[str, Any], path: Path) -> None:
    torch.save(state, path)


def write_plus_fsync(state: dict[str, Any], path: Path) -> None:
    # Through an open file, as save_atomic does, so the two differ only by what it adds.
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


def write_durable(state: dict[str, Any], path: Path) -> None:
    save_atomic(state, path)


WRITERS: dict[str, Writer] = {
    PLAIN: write_plain,
    PLUS_FSYNC: write_plus_fsync,
    DURABLE: write_durable,
}


# ---- the state ----------------------------------------------------------------------------


def make_model(size_mb: float) -> nn.Module:
    """Six square ``nn.Linear`` layers holding about ``size_mb`` MB of float32 parameters."""
    params = size_mb * MB / 4
    width = max(64, round(math.sqrt(params / LAYERS) / 64) * 64)
    torch.manual_seed(SEED)
    layers: list[nn.Module] = []
    for i in range(LAYERS):
        layers.append(nn.Linear(width, width))
        if i < LAYERS - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def make_states(size_mb: float, adamw: bool) -> dict[str, dict[str, Any]]:
    """The checkpoint states to write, by name; they share the model's tensors."""
    model = make_model(size_mb)
    params = list(model.parameters())

    def checkpoint(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": None,
            "step": 1000,
            "epoch": 3,
            "data": {"seed": SEED, "epoch": 3, "steps_into_epoch": 120},
            "loop": {"epoch_loss": torch.tensor(0.0), "window_loss": torch.tensor(0.0)},
            "early_stop": {"best": 0.5, "bad_epochs": 0},
            "best": {"step": 900, "metric": 0.5},
            "metrics": {"val/loss": 0.5, "val/accuracy": 0.9},
            "rng": rng_state(),
            "config": to_dict(load_config()),
            "versions": {"trainwell": trainwell.__version__, "torch": str(torch.__version__)},
            "log_rows": 250,
        }

    states = {"weights": checkpoint(torch.optim.SGD(params, lr=0.1))}
    if adamw:
        adam = torch.optim.AdamW(params, lr=1e-3)
        with torch.no_grad():
            for p in params:
                p.grad = torch.randn_like(p) * 1e-3
        adam.step()  # fills exp_avg and exp_avg_sq; the weights barely move
        for p in params:
            p.grad = None
        states["weights + AdamW"] = checkpoint(adam)
    return states


# ---- the folder ---------------------------------------------------------------------------


def filesystem_of(folder: Path) -> tuple[str, str]:
    """(type, device) of the filesystem holding ``folder``, from /proc/mounts (Linux)."""
    target = str(folder.resolve())
    best: tuple[int, str, str] = (-1, "unknown", "unknown")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best[1], best[2]
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        device, mount, fstype = (_unescape(f) for f in fields[:3])
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= best[0]:  # the last of equal mounts is the visible one
            best = (len(mount), fstype, device)
    return best[1], best[2]


def _unescape(field: str) -> str:
    # /proc/mounts writes a space as \040, a tab as \011, and so on.
    return field.encode().decode("unicode_escape") if "\\" in field else field


def pick_folder(base: str | None) -> tuple[Path, str | None]:
    """A fresh temporary folder to write into, and a note on why it is where it is."""
    if base is not None:
        Path(base).mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="trainwell-ckpt-bench-", dir=base)), None
    system = Path(tempfile.gettempdir())
    fstype, _ = filesystem_of(system)
    if fstype in IN_MEMORY:
        note = (
            f"{system} is {fstype} (in memory, where fsync costs nothing): "
            "writing under the current folder instead"
        )
        return Path(tempfile.mkdtemp(prefix=".trainwell-ckpt-bench-", dir=Path.cwd())), note
    return Path(tempfile.mkdtemp(prefix="trainwell-ckpt-bench-", dir=system)), None


def flush_all() -> None:
    """Write every dirty page out, so no write pays for the one before it."""
    sync = getattr(os, "sync", None)  # not on Windows
    if sync is not None:
        sync()


# ---- timing -------------------------------------------------------------------------------


def timed_write(writer: Writer, state: dict[str, Any], path: Path) -> tuple[float, int]:
    """Seconds one write takes, and the file's size; the file is removed afterwards."""
    gc.collect()
    flush_all()
    gc.disable()
    try:
        t0 = time.perf_counter()
        writer(state, path)
        elapsed = time.perf_counter() - t0
    finally:
        gc.enable()
    size = path.stat().st_size
    path.unlink()
    flush_all()
    return elapsed, size


def measure(
    state: dict[str, Any], folder: Path, repeats: int
) -> tuple[dict[str, list[float]], int]:
    """Every variant's times over ``repeats`` alternating rounds, after one warm-up each.

    Also returns the plain ``torch.save`` file's size (the others differ by a few hundred
    bytes: a zip archive's inner folder is named after the file, or "archive").
    """
    path = folder / "last.pt"
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    sizes: dict[str, int] = {}
    for variant in VARIANTS:  # warm-up: allocator, page cache, file system metadata
        _, sizes[variant] = timed_write(WRITERS[variant], state, path)
    for r in range(repeats):
        k = r % len(VARIANTS)
        for variant in VARIANTS[k:] + VARIANTS[:k]:
            elapsed, written = timed_write(WRITERS[variant], state, path)
            if written != sizes[variant]:
                raise SystemExit(
                    f"{variant} wrote {written} bytes; its warm-up wrote {sizes[variant]}"
                )
            times[variant].append(elapsed)
    leftovers = sorted(p.name for p in folder.iterdir())
    if leftovers:
        raise SystemExit(f"files left behind in {folder}: {leftovers}")
    return times, sizes[PLAIN]


# ---- main ---------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number; got {text}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Time trainwell's durable checkpoint write (save_atomic) next to a "
        "plain torch.save of the same state, in the same folder.",
    )
    parser.add_argument(
        "--size-mb", type=positive_float, default=100.0,
        help="model weights in MB (10**6 bytes) of float32 (default 100)",
    )  # fmt: skip
    parser.add_argument(
        "--repeats", type=positive_int, default=5,
        help="timed writes of each variant, after one warm-up (default 5)",
    )  # fmt: skip
    parser.add_argument(
        "--dir", default=None,
        help="write into a temporary folder made under this one (default: the system's "
        "temporary folder, unless it is in memory; then the current folder)",
    )  # fmt: skip
    parser.add_argument(
        "--no-adamw", action="store_true",
        help="skip the second state, with AdamW's moments (3x the model's size)",
    )  # fmt: skip
    parser.add_argument(
        "--quick", action="store_true",
        help="a smoke run: 10 MB and 2 repeats (overrides --size-mb and --repeats)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.size_mb, args.repeats = 10.0, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    states = make_states(args.size_mb, adamw=not args.no_adamw)
    folder, note = pick_folder(args.dir)
    try:
        fstype, device = filesystem_of(folder)
        if note:
            print(f"note: {note}")
        print(f"folder: {folder} ({fstype} on {device})")
        if fstype in IN_MEMORY:
            print(
                f"warning: {fstype} is in memory; fsync costs nothing there, so the ratio "
                "says nothing about a disk. Pass --dir on a disk-backed filesystem."
            )
        if hasattr(os, "getloadavg"):
            print(
                f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs); "
                "other work on the machine adds noise"
            )
        print(
            f"torch {torch.__version__}, trainwell {trainwell.__version__}, python "
            f"{sys.version.split()[0]}\n{args.repeats} timed writes of each variant, each "
            "into a new file, after one warm-up write; dirty pages flushed before each"
        )
        print()
        header = (
            f"{'state':<16} {'file':>9}  {'variant':<22} {'median s':>9} {'min s':>8} "
            f"{'MB/s':>7} {'vs plain':>8}"
        )
        print(header)
        print("-" * len(header))
        headline = math.nan
        for name, state in states.items():
            times, size = measure(state, folder, args.repeats)
            plain = statistics.median(times[PLAIN])
            for i, variant in enumerate(VARIANTS):
                med = statistics.median(times[variant])
                label = f"{name:<16} {size / MB:>6.1f} MB" if i == 0 else " " * 26
                print(
                    f"{label}  {variant:<22} {med:>9.3f} {min(times[variant]):>8.3f} "
                    f"{size / MB / med:>7.0f} {med / plain:>8.2f}"
                )
            if name == "weights":
                headline = statistics.median(times[DURABLE]) / plain
        print()
        print(f"ratio (durable / plain torch.save): {headline:.2f}")
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
