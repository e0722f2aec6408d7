"""The doctor's config: whether the engine runs the doctor's probes, and its overfit check."""

from __future__ import annotations

from dataclasses import dataclass

from trainwell._options import check_choice, check_number, option


@dataclass
class DoctorConfig:
    """The doctor's settings."""

    enabled: bool = option(
        True, "run the doctor's probes during training; findings go to doctor.json"
    )
    memory_growth_mb: float = option(
        1024.0,
        "warn once when allocated memory (CUDA) or live tensors (CPU) grow past this many "
        "MB over log points at constant work (0: off)",
    )
    memory_growth_action: str = option(
        "warn", "on memory growth: warn, checkpoint (write last.pt too), or stop (cleanly)"
    )
    overfit_batch: bool = option(
        False,
        "instead of training, train on the first batch over and over and report whether "
        "the loss goes near zero (below 5% of its start or 0.05); steps: train.max_steps, "
        "else 200",
    )

    def __post_init__(self) -> None:
        check_number(self.memory_growth_mb, "doctor.memory_growth_mb", low=0)
        check_choice(self.memory_growth_action, "doctor.memory_growth_action",
                     ("warn", "checkpoint", "stop"))  # fmt: skip
