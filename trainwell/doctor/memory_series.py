"""``trainwell doctor --memory``: a hand-written script's memory at each optimizer step,
and ``--profile``: its heaviest operators, as ``trainwell profile`` gives engine runs.

:class:`MemorySeries` is an extra probe, there only with ``--memory``: at every
optimizer step (or hand-written update) it records

- on CUDA: ``torch.cuda.memory_allocated``, ``memory_reserved`` and
  ``max_memory_allocated`` (the peak), and ``torch.cuda.memory_summary()`` whenever the
  peak grows by a twentieth (the summary at the run's peak is the last one taken);
- everywhere: the process's resident memory (RSS, from ``/proc/self/statm``) and the
  bytes of the tensors Python holds (each storage counted once, found by a scan of the
  garbage collector's objects: autograd's saved tensors are in RSS only). The scan costs
  time with many objects, so it runs at every step while it takes under a twentieth of
  the time between steps, then at every 2nd, 4th, ... step: those rows leave the column
  empty.

At the end it writes ``memory.csv`` (one row per step), ``memory.png`` (the curves) and
``memory_summary.txt`` (the CUDA summary at the peak, or a note that the run was on the
CPU, where PyTorch's allocator keeps no statistics) into its folder; after an
out-of-memory error on CUDA, ``memory_oom.txt`` holds the summary at the failure.

:class:`ScriptProfile` records a few optimizer steps of the script with
:class:`~trainwell.engine.tools.profiling.StepProfiler` (the same window, trace and operator
table) and prints the heaviest operators.
"""

from __future__ import annotations

import csv
import gc
import os
import time
from pathlib import Path
from typing import Any

import torch

from trainwell.doctor.events import Reporter, StepEvent, UpdateEvent

_MB = 2**20
CSV_NAME, PLOT_NAME, SUMMARY_NAME, OOM_NAME = (
    "memory.csv", "memory.png", "memory_summary.txt", "memory_oom.txt",
)  # fmt: skip
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int | None:
    """The process's resident memory now (Linux: /proc; elsewhere psutil, if installed).

    Example:
        >>> rss_bytes() is None or rss_bytes() > 0
        True
    """
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.Process().memory_info().rss)


def live_tensor_bytes() -> int:
    """Bytes of the tensors Python holds, each storage once (parameters included).

    Example:
        >>> keep = torch.zeros(2**20, dtype=torch.uint8)
        >>> live_tensor_bytes() >= 2**20
        True
    """
    seen: set[tuple[str, int]] = set()
    total = 0
    for obj in gc.get_objects():
        # type(), not isinstance: isinstance asks an object's __class__ (some warn).
        if not issubclass(type(obj), torch.Tensor):
            continue
        try:
            storage = obj.untyped_storage()
            key = (str(storage.device), storage.data_ptr())
            nbytes = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # meta, sparse, fake tensors
            continue
        if key not in seen:
            seen.add(key)
            total += nbytes
    return total


class MemorySeries:
    """Memory at every optimizer step, written as a CSV, a plot and a summary.

    Example:
        >>> import tempfile
        >>> series = MemorySeries(Path(tempfile.mkdtemp()))
        >>> series.sample(1); series.sample(2)
        >>> [r["step"] for r in series.rows]
        [1, 2]
        >>> sorted(p.name for p in series.write())
        ['memory.csv', 'memory.png', 'memory_summary.txt']
    """

    SCAN_SHARE = 0.05  # the tensor scan's most time, as a share of the time between steps

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        self.rows: list[dict[str, Any]] = []
        self.peak_summary: str | None = None  # CUDA: memory_summary() at the peak so far
        self.oom_summary: str | None = None
        self._peak = 0
        self._every = 1  # scan live tensors at every this many steps
        self._t0 = self._last = time.perf_counter()

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        self.sample(event.step)

    def on_update(self, doc: Reporter, event: UpdateEvent) -> None:
        self.sample(event.step)

    @staticmethod
    def _cuda() -> bool:
        return torch.cuda.is_available() and torch.cuda.is_initialized()

    def sample(self, step: int) -> None:
        """One row for optimizer step ``step``."""
        now = time.perf_counter()
        row: dict[str, Any] = {"step": step, "time_s": round(now - self._t0, 4)}
        rss = rss_bytes()
        row["rss_mb"] = None if rss is None else round(rss / _MB, 3)
        if self._cuda():
            self._cuda_row(row)
        row["live_tensor_mb"] = None
        if step % self._every == 0 or step == 1:
            start = time.perf_counter()
            row["live_tensor_mb"] = round(live_tensor_bytes() / _MB, 3)
            took = time.perf_counter() - start
            # Sparser while the scan costs more than its share of a step (the time since
            # the last sample, the scan itself excluded).
            if took > self.SCAN_SHARE * max(now - self._last, 1e-6) * self._every:
                self._every *= 2
        self.rows.append(row)
        self._last = time.perf_counter()

    def _cuda_row(self, row: dict[str, Any]) -> None:
        allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        peak = torch.cuda.max_memory_allocated()
        row.update(cuda_allocated_mb=round(allocated / _MB, 3),
                   cuda_reserved_mb=round(reserved / _MB, 3),
                   cuda_peak_mb=round(peak / _MB, 3))  # fmt: skip
        if peak > 1.05 * self._peak:
            self._peak = peak
            self.peak_summary = torch.cuda.memory_summary()

    def at_oom(self) -> None:
        """The script ran out of memory: keep the allocator's summary as it is now."""
        if self._cuda():
            self.oom_summary = torch.cuda.memory_summary()

    def write(self) -> list[Path]:
        """Write the files; return their paths."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        paths = [self._write_csv(), self._plot(), self._write_summary()]
        if self.oom_summary is not None:
            oom = self.out_dir / OOM_NAME
            oom.write_text("torch.cuda.memory_summary() at the out-of-memory error\n\n"
                           + self.oom_summary)  # fmt: skip
            paths.append(oom)
        return [p for p in paths if p is not None]

    def _columns(self) -> list[str]:
        cols = ["step", "time_s", "rss_mb", "live_tensor_mb"]
        if any("cuda_allocated_mb" in r for r in self.rows):
            cols += ["cuda_allocated_mb", "cuda_reserved_mb", "cuda_peak_mb"]
        return cols

    def _write_csv(self) -> Path:
        path = self.out_dir / CSV_NAME
        cols = self._columns()
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            writer.writeheader()
            for row in self.rows:
                writer.writerow({c: "" if row.get(c) is None else row[c] for c in cols})
        return path

    def _plot(self) -> Path | None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        fig, ax = plt.subplots(figsize=(7, 4))
        for col in self._columns()[2:]:
            points = [(r["step"], r[col]) for r in self.rows if r.get(col) is not None]
            if points:
                ax.plot(*zip(*points), label=col.removesuffix("_mb"), marker="." if
                        len(points) < 50 else None)  # fmt: skip
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("MB")
        ax.set_title("memory per optimizer step")
        if ax.lines:
            ax.legend()
        path = self.out_dir / PLOT_NAME
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        return path

    def _write_summary(self) -> Path:
        path = self.out_dir / SUMMARY_NAME
        if self.peak_summary is not None:
            text = "torch.cuda.memory_summary() at the peak of allocated memory\n\n"
            text += self.peak_summary
        else:
            text = ("CPU run: torch.cuda.memory_summary() describes the CUDA caching "
                    "allocator, which this run did not use; memory.csv holds the "
                    "process's RSS and the bytes of live tensors at each step.\n")  # fmt: skip
        path.write_text(text)
        return path

    def summary_lines(self, files: list[Path]) -> list[str]:
        """What the runner prints: the peak and the files."""
        if not self.rows:
            return ["memory: no optimizer step ran: nothing sampled"]
        line = f"memory: {len(self.rows)} steps sampled"
        for col, what in (("cuda_peak_mb", "CUDA peak allocated"), ("rss_mb", "peak RSS"),
                          ("live_tensor_mb", "most live tensor memory")):  # fmt: skip
            points = [(r[col], r["step"]) for r in self.rows if r.get(col) is not None]
            if points:
                top, at = max(points)
                line += f"; {what} {top:.1f} MB at step {at}"
        if self.peak_summary is None:
            line += " (CPU run: no CUDA allocator summary)"
        return [line, *(f"  {p}" for p in files)]


class ScriptProfile:
    """``torch.profiler`` over a few optimizer steps of a hand-written script.

    Example:
        >>> import tempfile
        >>> prof = ScriptProfile(Path(tempfile.mkdtemp()), warmup=0, active=1)
        >>> prof.profiler.warmup
        0
    """

    def __init__(self, out_dir: Path, warmup: int = 3, active: int = 5) -> None:
        from trainwell.engine.tools.profiling import StepProfiler

        device = "cuda" if torch.cuda.is_available() else "cpu"
        # with_stack off: the profiler's Python tracer and the doctor's wrappers crashed
        # the process together (the engine's StepProfiler says so); ops lose their module.
        self.profiler = StepProfiler(out_dir, warmup=warmup, active=active, device=device,
                                     with_stack=False)  # fmt: skip

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        self.profiler.step()

    def on_update(self, doc: Reporter, event: UpdateEvent) -> None:
        self.profiler.step()

    def close(self) -> list[str]:
        """End the window and say what it holds: a run cut inside it (a crash, Ctrl-C)
        still writes the steps recorded, and says how many."""
        self.profiler.close()
        return self.profiler.summary_lines()
