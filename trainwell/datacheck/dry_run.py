"""The data's one-line summary that ``trainwell train --dry-run`` prints.

Read from the run's own splits, over fewer samples than ``trainwell data`` (a dry run
takes seconds), with the model's number of classes from the dry step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainwell.config import Config
from trainwell.datacheck.render import summary_line
from trainwell.datacheck.report import inspect_splits
from trainwell.errors import UserError

if TYPE_CHECKING:
    from trainwell.engine.build.parts import Parts

# A dry run reads at most this many samples per split, within this many seconds in all.
DRY_RUN_SAMPLES = 2000
DRY_RUN_SECONDS = 5.0


def dry_run_data_line(cfg: Config, parts: Parts) -> str:
    """``data: train 1257 / val 270 / test 270, 10 classes, balanced; inputs ...``."""
    classes = parts.task.num_classes if parts.task.classification else None
    try:
        report = inspect_splits(cfg, parts.splits, DRY_RUN_SAMPLES, DRY_RUN_SECONDS, classes)
    except UserError as exc:  # the dry step itself read the data; say what failed here
        return f"data: not summarized ({exc})"
    return summary_line(report)
