"""``torch.profiler`` over a few optimizer steps: a trace and the heaviest operators.

:class:`StepProfiler` is told of every optimizer step. It lets ``warmup`` steps pass
untouched (the first steps pay for allocator growth, cuDNN autotuning, lazy
initialisation: none of that is the steady state worth reading), records the next
``active`` steps with ``torch.profiler`` (CPU, and CUDA on a CUDA device; memory and
shapes), then stops on its own and writes into its folder:

- ``trace.json``: a Chrome/Perfetto trace (https://ui.perfetto.dev or chrome://tracing);
- ``profile_ops.csv``: every operator, heaviest self time first, with its calls, times,
  the memory it allocated, its rank by memory and the module it ran in.

Operators are attributed to the ``nn.Module`` whose ``forward`` ran them through the
Python frames the profiler records (``with_stack``; ``with_modules`` covers TorchScript
only). Backward operators get the module of the forward operator that made their
autograd node (matched by the autograd sequence number); operators outside any module
get the ``record_function`` range around them (the optimizer's step, the DataLoader).
"""

from __future__ import annotations

import contextlib
import csv
import os
from pathlib import Path
from typing import Any

import torch

from trainwell.engine.run_dir.directory import write_error
from trainwell.engine.tools.native_noise import NoiseFilter
from trainwell.engine.tools.profile_ops import STEP_RANGE, OpStat, aggregate
from trainwell.errors import UserError

TRACE = "trace.json"
OPS_CSV = "profile_ops.csv"
VIEWER = "open in https://ui.perfetto.dev or chrome://tracing"
TOP = 5
_MB = 2**20


class StepProfiler:
    """Profile ``active`` optimizer steps after ``warmup``; write a trace and an op table.

    Call :meth:`step` after every optimizer step and :meth:`close` when training ends
    (or use it as a context manager, which discards the window on an exception). Outside
    its window no profiler object exists, so the other steps pay one integer comparison.
    On several processes, give one to rank 0 only: one trace is what a reader wants, and
    every rank's would look alike.

    Args:
        out_dir: where ``trace.json`` and ``profile_ops.csv`` go (created when written).
        warmup: optimizer steps left alone first (0: recording starts at once).
        active: optimizer steps recorded (at least 1).
        device: the training device; CUDA kernels are recorded on a CUDA device.

    Example:
        >>> import tempfile
        >>> from torch import nn
        >>> out = Path(tempfile.mkdtemp())
        >>> net = nn.Linear(4, 2)
        >>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
        >>> with StepProfiler(out, warmup=1, active=2, device=torch.device("cpu")) as prof:
        ...     for _ in range(4):
        ...         net(torch.randn(8, 4)).sum().backward()
        ...         opt.step()
        ...         prof.step()
        >>> sorted(p.name for p in out.iterdir())
        ['profile_ops.csv', 'trace.json']
        >>> prof.done, prof.recorded
        (True, 2)
    """

    def __init__(
        self,
        out_dir: Path,
        warmup: int = 3,
        active: int = 5,
        device: torch.device | str = "cpu",
        with_stack: bool = True,
    ) -> None:
        if warmup < 0:
            raise UserError(f"profile: warm-up steps must be 0 or more; got {warmup}")
        if active < 1:
            raise UserError(f"profile: profiled steps must be at least 1; got {active}")
        self.out_dir = Path(out_dir)
        self.trace_path = self.out_dir / TRACE
        self.ops_path = self.out_dir / OPS_CSV
        self.warmup = warmup
        self.active = active
        self.device = torch.device(device)
        # Off under the doctor: its wrapped torch calls and the profiler's Python tracer
        # crashed the process together (SIGSEGV); ops then show without their module.
        self.with_stack = with_stack
        self.seen = 0  # optimizer steps told of
        self.recorded = 0  # whole steps inside the window
        self.done = False  # the window closed (files written, or a note says why not)
        self.ops: list[OpStat] = []  # heaviest self time first, once done
        self.note: str | None = None
        self._prof: torch.profiler.profile | None = None
        self._noise = NoiseFilter()
        self._step_range: Any = None  # the open "ProfilerStep#N" range, in the window
        if warmup == 0:
            # step() comes after a step: waiting for the first call would miss step 1.
            self._start()

    @property
    def on_cuda(self) -> bool:
        return self.device.type == "cuda"

    def step(self) -> None:
        """Note one optimizer step: open the window after ``warmup``, close it after ``active``."""
        self.seen += 1
        if self._prof is not None:
            self.recorded += 1
            self._end_step_range()
            if self.recorded >= self.active:
                self._finish()
            else:
                self._begin_step_range()
        elif self.seen == self.warmup and not self.done:
            self._start()

    def close(self) -> None:
        """End early or after the fact: write what the window holds, or note why nothing.

        Safe at any time and more than once; a no-op once the files are written.
        """
        if self._prof is not None:
            self._finish()
        elif not self.done:
            self.done = True
            self.note = (
                f"profiler: nothing recorded: training ended after {self.seen} steps, "
                f"before the {self.warmup} warm-up steps were over"
            )

    def discard(self) -> None:
        """Stop recording and write nothing (a run that crashed inside the window)."""
        prof, self._prof = self._prof, None
        if prof is not None:
            self._end_step_range()
            try:
                prof.stop()
            finally:
                self._noise.close()
        if not self.done:
            self.done = True
            self.note = f"profiler: discarded after {self.recorded} recorded steps"

    def __enter__(self) -> StepProfiler:
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        # A crash inside the window is not the steady state the files would claim to show;
        # the profiler is stopped all the same, so that no later code runs profiled.
        if kind is None:
            self.close()
        else:
            self.discard()

    def heaviest(self, n: int = TOP) -> list[OpStat]:
        """The ``n`` operators with the most self time (CUDA time on a CUDA device)."""
        return self.ops[:n]

    def self_ms(self, op: OpStat) -> float:
        """The time an op is ranked by, in ms: its self CUDA time on CUDA, else CPU."""
        return (op.self_cuda_us if self.on_cuda else op.self_cpu_us) / 1000

    def memory_mb(self, op: OpStat) -> float:
        """What an op allocated (less what it freed), in MiB: on the GPU on CUDA."""
        return (op.cuda_memory_b if self.on_cuda else op.cpu_memory_b) / _MB

    def summary_lines(self) -> list[str]:
        """What to print: the window, the five heaviest operators with their module, the
        files; or the one-line note when nothing was recorded."""
        if self.note is not None:
            return [self.note]
        if self._prof is not None:
            return [f"profiler: recording ({self.recorded} of {self.active} steps so far)"]
        if not self.done:
            return [f"profiler: waiting ({self.seen} of {self.warmup} warm-up steps)"]
        clock = "CUDA" if self.on_cuda else "CPU"
        # A run that ended inside the window still wrote what it recorded: say how much.
        short = ""
        if self.recorded < self.active:
            short = f" (training ended inside the {self.active}-step window)"
        lines = [
            f"profiled {self.recorded} steps after {self.warmup} warm-up on {self.device}"
            f"{short}; heaviest operators by self {clock} time:"
        ]
        total = sum(self.self_ms(op) for op in self.ops) or 1.0
        for op in self.heaviest():
            ms = self.self_ms(op)
            lines.append(
                f"  {op.name:<28} {ms:9.2f} ms {100 * ms / total:5.1f}%  {op.calls:>5} calls  "
                f"{self.memory_mb(op):8.2f} MB  in {op.module or '(no module)'}"
            )
        lines.append(f"trace: {self.trace_path} ({VIEWER})")
        lines.append(f"operators: {self.ops_path}")
        return lines

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if self.on_cuda:
            activities.append(ProfilerActivity.CUDA)
        # with_stack records the Python frames, "nn.Module: X_i" among them: how an op is
        # tied to its module in eager mode.
        self._prof = profile(
            activities=activities,
            profile_memory=True,
            record_shapes=True,
            with_stack=self.with_stack,
        )
        # Kineto's trace points and the allocator's note come from C++ to fd 2, at the start,
        # during the steps and at the stop: filtered out for the profiled window.
        self._noise.open()
        self._prof.start()
        self._begin_step_range()

    def _begin_step_range(self) -> None:
        # torch.profiler marks steps only under a schedule, whose own warm-up and waiting
        # would keep a profiler alive outside the window: the same marks, made here.
        from torch.autograd.profiler import record_function

        self._step_range = record_function(f"{STEP_RANGE}{self.seen + 1}")
        self._step_range.__enter__()

    def _end_step_range(self) -> None:
        if self._step_range is not None:
            self._step_range.__exit__(None, None, None)
            self._step_range = None

    def _finish(self) -> None:
        prof, self._prof = self._prof, None  # dropped here: no profiler outlives the window
        assert prof is not None
        self._end_step_range()
        if self.on_cuda:
            torch.cuda.synchronize(self.device)  # the last step's kernels belong in the trace
        try:
            prof.stop()
        finally:
            self._noise.close()
        self.done = True
        events = prof.events()
        self.ops = aggregate(events, by_cuda=self.on_cuda)
        if not self.ops:
            self.note = "profiler: the window closed before any operator ran; nothing written"
            return
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(self.out_dir, exc) from None
        _atomic(self.trace_path, prof.export_chrome_trace)
        _atomic(self.ops_path, self._write_csv)

    def _write_csv(self, path: str) -> None:
        mem_of = (lambda op: op.cuda_memory_b) if self.on_cuda else (lambda op: op.cpu_memory_b)
        by_memory = sorted(self.ops, key=mem_of, reverse=True)
        memory_rank = {id(op): i for i, op in enumerate(by_memory, 1)}
        header = ["name", "module", "calls", "self_cpu_ms", "cpu_total_ms"]
        header += ["self_cuda_ms"] * self.on_cuda + ["cpu_memory_mb"]
        header += ["cuda_memory_mb"] * self.on_cuda + ["memory_rank"]
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            for op in self.ops:
                row = [op.name, op.module, op.calls, _ms(op.self_cpu_us), _ms(op.cpu_total_us)]
                row += [_ms(op.self_cuda_us)] * self.on_cuda + [_mb(op.cpu_memory_b)]
                row += [_mb(op.cuda_memory_b)] * self.on_cuda + [memory_rank[id(op)]]
                writer.writerow(row)


def _atomic(path: Path, write: Any) -> None:
    """Write through a temporary name: a crash or a full disk leaves no half file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(str(tmp))
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise write_error(path, exc) from None


def _ms(us: float) -> str:
    return f"{us / 1000:.4f}"


def _mb(b: int) -> str:
    return f"{b / _MB:.4f}"
