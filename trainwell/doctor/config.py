"""The doctor's config: whether the engine runs the doctor's probes, and its overfit check."""

from __future__ import annotations

from dataclasses import dataclass

from trainwell._options import option


@dataclass
class DoctorConfig:
    """The doctor's settings."""

    enabled: bool = option(
        True, "run the doctor's probes during training; findings go to doctor.json"
    )
    overfit_batch: bool = option(
        False,
        "instead of training, train on the first batch over and over and report whether "
        "the loss goes near zero (below 5% of its start or 0.05); steps: train.max_steps, "
        "else 200",
    )
