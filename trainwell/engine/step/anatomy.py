"""Where each step's time goes: waiting for data, copying it, forward+backward, the optimizer,
and the rest (logging, callbacks, checkpoints).

The loop marks the end of each phase (``clock.mark("compute")``); the time since the
previous mark goes to that phase. On a CPU a mark is one ``perf_counter`` call. On CUDA
the host runs ahead of the device, so a host timer would credit the device's work to
whichever phase happens to wait for it: a mark records a CUDA event instead, and the
events are read only at log points (one sync there, where the loop syncs anyway to read
the loss), never per step.

Example:
    >>> clock = StepClock(torch.device("cpu"))
    >>> clock.restart()
    >>> clock.mark("data"); clock.mark("compute")
    >>> shares = clock.window()
    >>> sorted(shares)  # no copy on a CPU, no compile without train.compile
    ['time/compute', 'time/data', 'time/optim', 'time/other', 'time/step_ms']
    >>> abs(sum(v for k, v in shares.items() if k != "time/step_ms") - 1) < 1e-6
    True
"""

from __future__ import annotations

import time

import torch

# The phases, in the order a step goes through them. "compile" holds the first step's
# forward+backward when torch.compile is on (its compilation), kept apart from "compute".
PHASES = ("data", "copy", "compute", "optim", "other", "compile")


class StepClock:
    """Time per phase over a log window (``window()``) and over the whole run (``totals``)."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self.totals = dict.fromkeys(PHASES, 0.0)  # seconds, the whole run
        self._window = dict.fromkeys(PHASES, 0.0)
        self._steps = 0
        self._last: float = time.perf_counter()
        # CUDA: (phase, event) marks not yet read, and the event before the first of them.
        self._events: list[tuple[str, torch.cuda.Event]] = []
        self._origin: torch.cuda.Event | None = None

    def restart(self) -> None:
        """Start timing from now (an epoch's start: the evaluation before is no step's)."""
        if self._cuda:
            self._flush_events()
            self._origin = self._record()
        self._last = time.perf_counter()

    def mark(self, phase: str, ends_step: bool = False) -> None:
        """The phase that just ended is ``phase``: the time since the last mark is its.
        ``ends_step``: it is the step's last, and the step is counted (the window's mean step
        time divides by the steps counted)."""
        if ends_step:
            self._steps += 1
        if self._cuda:
            self._events.append((phase, self._record()))
            return
        now = time.perf_counter()
        self._window[phase] += now - self._last
        self._last = now

    @property
    def since(self) -> float:
        """The time of the last mark (``time.perf_counter()``): where the next phase began."""
        return self._last

    def record(self, data: float, compute: float, optim: float, steps: int, until: float) -> None:
        """Steps a loop timed itself, on the CPU (:mod:`trainwell.engine.step.lean`): their
        seconds of each phase into the window, as :meth:`mark` would have added them, the
        steps counted; ``until`` is the time of its last reading (the next phase's start)."""
        assert not self._cuda, "a CUDA step's phases are timed by events (mark)"
        window = self._window
        window["data"] += data
        window["compute"] += compute
        window["optim"] += optim
        self._steps += steps
        self._last = until

    def window(self) -> dict[str, float]:
        """The window's share of time per phase (``time/<phase>``, summing to 1) and its mean
        step time (``time/step_ms``); then a new window starts."""
        if self._cuda:
            self._flush_events()
        spent = sum(self._window.values())
        # A phase this run never had (copy on a CPU, compile without train.compile) is no row.
        shares = {
            f"time/{p}": (t / spent if spent > 0 else 0.0)
            for p, t in self._window.items()
            if t > 0 or self.totals[p] > 0 or p in ("data", "compute", "optim", "other")
        }
        # Compilation is reported apart (its one line and row): not in the step time.
        stepping = spent - self._window["compile"]
        shares["time/step_ms"] = 1000 * stepping / max(self._steps, 1)
        for phase, seconds in self._window.items():
            self.totals[phase] += seconds
        self._window = dict.fromkeys(PHASES, 0.0)
        self._steps = 0
        return shares

    def shares(self) -> dict[str, float]:
        """The whole run's share per phase so far (for ``summary.json``), rounded."""
        spent = sum(self.totals.values())
        if spent <= 0:
            return {}
        return {p: round(t / spent, 4) for p, t in self.totals.items() if t > 0}

    def _record(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def _flush_events(self) -> None:
        """Read the pending CUDA events (one sync, on the last of them)."""
        if not self._events:
            return
        self._events[-1][1].synchronize()
        before = self._origin
        for phase, event in self._events:
            if before is not None:
                self._window[phase] += before.elapsed_time(event) / 1000
            before = event
        self._origin = before
        self._events.clear()
