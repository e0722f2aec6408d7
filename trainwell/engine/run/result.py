"""What a run returns to its caller."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes:
        run_dir: the run directory (``None`` for a dry run).
        metrics: final metrics as floats, e.g. ``{"val/accuracy": 0.99, "test/loss": 0.04}``.
        summary: the content of ``summary.json`` (``"weights"`` says whose ``model`` holds).
        model: the trained model, holding the best checkpoint's weights (the last ones
            when no evaluation ever improved a monitored metric).
    """

    run_dir: Path | None
    metrics: dict[str, float]
    summary: dict[str, Any] = field(default_factory=dict)
    model: nn.Module | None = None
