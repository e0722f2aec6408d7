"""TensorBoard: every scalar, and the resolved config as text, under ``RUN/tensorboard/``.

``tensorboard --logdir runs`` then shows every run side by side. A resumed run writes to
the same folder with ``purge_step`` one past its checkpoint: TensorBoard's reader drops
the points the killed process wrote after that checkpoint, so no step appears twice.

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

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


class TensorBoardLogger:
    """A ``SummaryWriter`` on the run's ``tensorboard/`` folder.

    Callbacks reach the writer as ``ctx.loggers["tensorboard"].writer`` (to add an image
    or a figure at the run's step).
    """

    def __init__(self, folder: Path, resume_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # Events are queued and written by the writer's own thread; flush() at checkpoints.
        purge = resume_step + 1 if resume_step is not None else None
        self.writer = SummaryWriter(log_dir=str(folder), purge_step=purge, flush_secs=60)

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
