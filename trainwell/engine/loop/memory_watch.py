"""The engine's memory monitor (the articles' MemoryMonitor): sustained growth of allocated
memory at constant work, seen at log points, warned about once, and (a setting) a
checkpoint or a clean stop before the out-of-memory comes.

Training at constant work (the same model, batch size and optimizer) holds a flat amount
of memory once the first steps have allocated the optimizer's state and the allocator has
warmed up. Memory that keeps rising step after step is something held from every step:
a loss kept with its graph, tensors summed into a Python number's place. The doctor's
probes name the line that holds it; this monitor is the engine's alarm, which sees the
figures (CUDA's allocated bytes, or on the CPU the bytes of live tensors) and acts before
the run dies of it.

Example:
    >>> watch = MemoryWatch(threshold_mb=10, action="warn")
    >>> seen = [watch.update(step, {"mem/tensor_mb": mb}) for step, mb in
    ...         [(10, 5), (20, 6), (30, 9), (40, 13), (50, 18), (60, 24)]]
    >>> [s is not None for s in seen], round(seen[-1].grown_mb)
    ([False, False, False, False, False, True], 15)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# The figure watched: allocated bytes on CUDA; on the CPU, live tensors (RSS also counts
# the allocator's free pages and the data loader's buffers, which come and go).
WATCHED = ("mem/cuda_allocated_mb", "mem/tensor_mb")
ACTIONS = ("warn", "checkpoint", "stop")
# Samples before the baseline is taken: the first steps allocate the optimizer's state,
# the allocator's pools and the autograd buffers once.
SETTLE = 2
# Growth counts as sustained when it held over this many samples in a row.
SUSTAINED = 3


@dataclass
class Growth:
    """What the monitor saw: from ``baseline_mb`` at ``since_step`` to ``now_mb`` at ``step``."""

    figure: str
    baseline_mb: float
    now_mb: float
    since_step: int
    step: int

    @property
    def grown_mb(self) -> float:
        return self.now_mb - self.baseline_mb

    def line(self, action: str, holder: str | None) -> str:
        """The one warning line, with the doctor's holder finding when there is one."""
        per_step = self.grown_mb / max(self.step - self.since_step, 1)
        text = (f"memory growth: {self.figure.removeprefix('mem/')} rose {self.grown_mb:,.1f} "
                f"MB from step {self.since_step} to step {self.step} ({per_step * 1024:,.1f} "
                f"KB per step) at constant work: something keeps what each step makes")  # fmt: skip
        text += f"; the doctor found it: {holder}" if holder else (
            "; run `trainwell doctor` on a hand-written loop, or keep doctor.enabled=true, "
            "to find the line that holds it")  # fmt: skip
        if action == "checkpoint":
            text += "; last.pt written now, before an out-of-memory"
        elif action == "stop":
            text += "; the run stops now, cleanly (last.pt written), before an out-of-memory"
        return text


@dataclass
class MemoryWatch:
    """Feeds on the ``mem/*`` figures of each log point; :meth:`update` returns the
    :class:`Growth` once, the first time the growth past the baseline exceeds
    ``threshold_mb`` and has held over the last samples. ``threshold_mb`` 0: off."""

    threshold_mb: float
    action: str = "warn"
    samples: list[tuple[int, float]] = field(default_factory=list)
    fired: bool = False
    _figure: str | None = None

    def update(self, step: int, figures: Mapping[str, float]) -> Growth | None:
        if self.fired or self.threshold_mb <= 0:
            return None
        figure = self._figure or next((f for f in WATCHED if f in figures), None)
        if figure is None or figure not in figures:
            return None  # none this log point (the CPU's tensor walk is not every time)
        self._figure = figure
        self.samples.append((step, float(figures[figure])))
        settled = self.samples[SETTLE:]
        if len(settled) < SUSTAINED + 1:
            return None
        since, baseline = min(settled, key=lambda s: s[1])
        last = [mb for _, mb in settled[-SUSTAINED - 1 :]]
        rising = all(b >= a for a, b in zip(last, last[1:])) and last[-1] > last[0]
        if rising and last[-1] - baseline > self.threshold_mb:
            self.fired = True
            return Growth(figure, baseline, last[-1], since, step)
        return None


def holder_of(findings: list) -> str | None:
    """The doctor's finding that names what holds memory (``graph-retained`` and kin)."""
    for f in findings:
        if getattr(f, "code", None) in ("graph-retained", "tensor-accumulation"):
            return f"{f.code} at {f.file}:{f.line}"
    return None


def watch_step(
    watch: MemoryWatch, step: int, figures: Mapping[str, float],
    findings: Callable[[], list], say: Callable[[str], None],
) -> str | None:
    """One log point: the warning said when growth is seen; returns the action to take
    (``checkpoint``, ``stop``) or ``None``."""
    growth = watch.update(step, figures)
    if growth is None:
        return None
    say(growth.line(watch.action, holder_of(findings())))
    return None if watch.action == "warn" else watch.action


def apply_cuda_alloc_conf(conf: str, say: Callable[[str], None]) -> None:
    """``run.cuda_alloc_conf``: into ``PYTORCH_CUDA_ALLOC_CONF`` before CUDA starts (the
    allocator reads it once, at its first allocation). Launched workers inherit it. Too late
    (CUDA already allocated in this process with another setting): one line saying so."""
    import os

    import torch

    if not conf or os.environ.get("PYTORCH_CUDA_ALLOC_CONF") == conf:
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        say(f"[yellow]warning[/]: run.cuda_alloc_conf={conf} comes too late: CUDA already "
            "started in this process; set PYTORCH_CUDA_ALLOC_CONF before Python starts")
        return
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
