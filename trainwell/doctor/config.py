"""The doctor's config: whether the engine runs the doctor's probes during training."""

from __future__ import annotations

from dataclasses import dataclass

from trainwell._options import option


@dataclass
class DoctorConfig:
    """The doctor's settings."""

    enabled: bool = option(
        True, "run the doctor's probes during training; findings go to doctor.json"
    )
