"""TensorBoard: every scalar, and the resolved config as text, under ``RUN/tensorboard/``.

``tensorboard --logdir runs`` then shows every run side by side. A resumed run writes to
the same folder with ``purge_step`` at its checkpoint's step: TensorBoard's reader drops
every point the killed process wrote from that step on, and the rows of that step which
the checkpoint kept (metrics.csv's) are written again, so each step appears once, with
the values metrics.csv has. (A step-N checkpoint comes before that step's evaluation: a
purge one step later would keep the killed process's evaluation and add the resumed one.)

A folder it cannot write (read-only, another user's, a full disk) switches the logger off
with one line, as any failing logger is (:class:`~trainwell.loggers.base.Loggers`); the
run goes on. The writer's own thread never prints a traceback: its error reaches the next
call, which is where the logger is switched off.

Needs the ``tensorboard`` package (``pip install 'trainwell[tensorboard]'``).

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> tb = TensorBoardLogger(folder / "tensorboard")
    >>> tb.log_metrics(10, {"train/loss": 0.5})
    >>> tb.close()
    >>> any((folder / "tensorboard").glob("events.out.tfevents.*"))
    True
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml


class TensorBoardLogger:
    """A ``SummaryWriter`` on the run's ``tensorboard/`` folder.

    Callbacks reach the writer as ``ctx.loggers["tensorboard"].writer`` (to add an image
    or a figure at the run's step).
    """

    def __init__(
        self,
        folder: Path,
        resume_step: int | None = None,
        kept: Iterable[tuple[int, int, str, str, float]] = (),
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # The events file is created by the writer's thread, where a failure would only be a
        # traceback on stderr: find out here, and fail the first call instead (one line).
        self.error = _unwritable(folder)
        self.writer: Any = None
        if self.error is not None:
            return
        _quiet_writer_threads()
        # Events are queued and written by the writer's own thread; flush() at checkpoints.
        try:
            self.writer = SummaryWriter(log_dir=str(folder), purge_step=resume_step,
                                        flush_secs=60)  # fmt: skip
        except OSError as exc:  # the first events could not be written after all
            self.error = exc
            return
        if resume_step is not None:
            for step, _epoch, split, name, value in kept:
                if step == resume_step:
                    self.writer.add_scalar(f"{split}/{name}", value, step)

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self._check()
        add = self.writer.add_scalar
        for name, value in metrics.items():
            add(name, value, step)

    def log_config(self, config: Mapping[str, Any]) -> None:
        self._check()
        text = yaml.safe_dump(dict(config), sort_keys=False)
        # Indented four spaces: TensorBoard renders text as Markdown, this as a code block.
        self.writer.add_text("config", "\n".join(f"    {line}" for line in text.splitlines()))

    def flush(self) -> None:
        self._check()
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _unwritable(folder: Path) -> OSError | None:
    """The error that creating a file in ``folder`` gives, if any."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".trainwell-probe-")
    except OSError as exc:  # named by the folder: the probe's own name means nothing
        return type(exc)(exc.errno, exc.strerror, str(folder))
    os.close(fd)
    os.unlink(probe)
    return None


def _quiet_writer_threads() -> None:
    """TensorBoard's writer thread keeps its error for the next call, and also prints it
    as a traceback through ``threading.excepthook``: leave that out (once per process)."""
    try:
        from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread
    except ImportError:  # another layout: tracebacks stay, nothing else changes
        return
    previous = threading.excepthook
    if getattr(previous, "trainwell_tb", False):
        return

    def hook(args: Any) -> None:
        if not isinstance(args.thread, _AsyncWriterThread):
            previous(args)

    hook.trainwell_tb = True  # type: ignore[attr-defined]
    threading.excepthook = hook
