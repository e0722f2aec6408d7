"""TensorBoard: every scalar, and the resolved config as text, under ``RUN/tensorboard/``.

``tensorboard --logdir runs`` then shows every run side by side. A resumed run writes to
the same folder with ``purge_step`` at its checkpoint's step: TensorBoard's reader drops
every point the killed process wrote from that step on, and the rows of that step which
the checkpoint kept (metrics.csv's) are written again, so each step appears once, with
the values metrics.csv has. (A step-N checkpoint comes before that step's evaluation: a
purge one step later would keep the killed process's evaluation and add the resumed one.)

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

from collections.abc import Mapping, Sequence
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
        kept: Sequence[tuple[int, int, str, str, float]] = (),
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # Events are queued and written by the writer's own thread; flush() at checkpoints.
        self.writer = SummaryWriter(log_dir=str(folder), purge_step=resume_step, flush_secs=60)
        if resume_step is not None:
            for step, _epoch, split, name, value in kept:
                if step == resume_step:
                    self.writer.add_scalar(f"{split}/{name}", value, step)

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        add = self.writer.add_scalar
        for name, value in metrics.items():
            add(name, value, step)

    def log_config(self, config: Mapping[str, Any]) -> None:
        text = yaml.safe_dump(dict(config), sort_keys=False)
        # Indented four spaces: TensorBoard renders text as Markdown, this as a code block.
        self.writer.add_text("config", "\n".join(f"    {line}" for line in text.splitlines()))

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
