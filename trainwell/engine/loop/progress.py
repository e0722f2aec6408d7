"""Progress: a rich progress bar on a terminal; one plain line per epoch otherwise.

Without a terminal (CI logs, ``nohup``, a pipe) nothing is ever wrapped: a console made
by :func:`make_console` keeps every line whole, the resume command included.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Mapping
from typing import IO

from rich.console import Console


def make_console(file: IO[str] | None = None, quiet: bool = False) -> Console:
    """A console that wraps lines only on a terminal (never in logs and pipes).

    Example:
        >>> import io
        >>> out = io.StringIO()
        >>> make_console(out).print("x" * 120)
        >>> len(out.getvalue().splitlines()[0])
        120
    """
    stream = file if file is not None else sys.stdout
    terminal = hasattr(stream, "isatty") and stream.isatty()
    return RunConsole(file=file, quiet=quiet, soft_wrap=not terminal)


class RunConsole(Console):
    """rich's console, except that output whose reader is gone (a launcher killed with
    its pipe, ``trainwell train | head``) is dropped rather than ending the process:
    rich raises ``SystemExit(1)`` there, which would turn a graceful stop (the run
    saving its state) into a failed run."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        # Where stdout is a real descriptor, later writes (print, logging) go nowhere too.
        with contextlib.suppress(AttributeError, OSError, ValueError):
            os.dup2(devnull, sys.stdout.fileno())


class Progress:
    """A rich progress bar on a terminal; one plain line per epoch otherwise (CI logs).

    A logger of the run (:mod:`trainwell.loggers`): the bar follows ``log_metrics``'s
    ``train/loss``, ``train/lr`` and ``train/samples_per_s``; ``epoch`` says which epoch
    the bar is in.
    """

    def __init__(
        self,
        console: Console,
        total: int,
        start: int = 0,
        epoch: Callable[[], int] = lambda: 0,
    ) -> None:
        self.console = console
        self._epoch = epoch
        self.bar = None
        if console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("epoch {task.fields[epoch]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]} lr {task.fields[lr]} {task.fields[rate]}"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            self.task = self.bar.add_task(
                "train", total=total, completed=start, epoch=0, loss="-", lr="-", rate=""
            )
            self.bar.start()

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        if self.bar is None or "train/lr" not in metrics:
            return  # evaluation and test numbers show in the epoch line
        nan = float("nan")
        self.bar.update(
            self.task,
            completed=step,
            epoch=self._epoch() + 1,
            loss=f"{metrics.get('train/loss', nan):.4f}",
            lr=f"{metrics['train/lr']:.2e}",
            rate=f"{metrics.get('train/samples_per_s', nan):,.0f} samples/s, "
            f"data wait {metrics.get('train/time/data', nan):.0%}",
        )

    def epoch_line(self, epoch: int, epochs: int, step: int, metrics: dict[str, float]) -> None:
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items() if not k.startswith("test/"))
        self.console.print(f"epoch {epoch + 1}/{epochs}  step {step}  {shown}", highlight=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
