"""The loop's own state: counters and running sums, and every RNG's state.

Model, optimizer, scheduler and the rest keep their own state; the
:class:`~trainwell.engine.checkpointing.checkpointer.Checkpointer` puts them together. What is here
is
what the loop itself would otherwise lose on a restart: where it is, the metric sums of
the open log window and epoch, the best value and the last metrics.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trainwell.engine.state.metrics import MetricSums


@dataclass
class LoopState:
    """Counters and running sums of the training loop.

    Example:
        >>> s = LoopState(torch.device("cpu"))
        >>> s.step, s.steps_into_epoch
        (0, 0)
        >>> s.load_state_dict(s.state_dict())
    """

    device: torch.device
    step: int = 0
    epoch: int = 0
    epoch_start_step: int = 0
    # True once the epoch's end (evaluation, last.pt) is done: a resume starts the next.
    epoch_done: bool = False
    best: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # On the device: a step adds to them without a sync; read at log points.
        self.window = MetricSums(self.device)
        self.epoch_sums = MetricSums(self.device)
        # The optimizer's own figures (the gradient norm) per log window: logged, not
        # part of the epoch's metrics.
        self.optim_window = MetricSums(self.device)
        # fp16: optimizer steps the GradScaler skipped (an inf/NaN gradient), counted on the
        # device by the stepper without a sync, read at log points and checkpoints.
        self.amp_skipped = torch.zeros((), dtype=torch.int64, device=self.device)

    @property
    def steps_into_epoch(self) -> int:
        return self.step - self.epoch_start_step

    def start_epoch(self, epoch: int, skip_steps: int) -> None:
        """Enter ``epoch``; a fresh one (not a resumed one) starts its sums at zero."""
        self.epoch, self.epoch_start_step = epoch, self.step - skip_steps
        self.epoch_done = False
        if not skip_steps:
            self.window.reset()
            self.epoch_sums.reset()
            self.optim_window.reset()

    def close_window(self) -> None:
        """The window's sums join its epoch's; the next window starts at zero."""
        self.epoch_sums.merge(self.window)
        self.window.reset()

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "steps_into_epoch": self.steps_into_epoch,
            "epoch_done": self.epoch_done,
            "window": self.window.state_dict(),
            "epoch_sums": self.epoch_sums.state_dict(),
            "optim_window": self.optim_window.state_dict(),
            "best": dict(self.best),
            "metrics": dict(self.metrics),
            "amp_skipped": int(self.amp_skipped.item()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.epoch = int(state["epoch"])
        self.epoch_start_step = self.step - int(state["steps_into_epoch"])
        self.epoch_done = bool(state["epoch_done"])
        self.window.load_state_dict(state["window"])
        self.epoch_sums.load_state_dict(state["epoch_sums"])
        if "optim_window" in state:  # checkpoints from before it was kept
            self.optim_window.load_state_dict(state["optim_window"])
        self.best = dict(state.get("best") or {})
        self.metrics = {k: float(v) for k, v in (state.get("metrics") or {}).items()}
        # In place: the stepper counts into this very tensor.
        self.amp_skipped.fill_(int(state.get("amp_skipped", 0)))


def rng_state() -> dict[str, Any]:
    """Every RNG's state as tensors and plain containers (loadable with weights_only)."""
    # The legacy tuple (numpy's default), asked for by name: numpy's stub types the call
    # without arguments as the dict form.
    np_state = np.random.get_state(legacy=True)
    assert isinstance(np_state, tuple)  # the MT19937 global RNG always gives the tuple
    _, keys, pos, has_gauss, cached_gaussian = np_state
    state: dict[str, Any] = {
        "python": _python_rng(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put every RNG back where :func:`rng_state` found it."""
    _restore_python_rng(state["python"])
    np_state = state["numpy"]
    np.random.set_state(
        ("MT19937", np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
         np_state["has_gauss"], np_state["cached_gaussian"])
    )  # fmt: skip
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _python_rng() -> dict[str, Any]:
    """Python's RNG state with its 625 words in one tensor.

    As a tuple, each int is pickled on its own through torch's persistent_id: 625 of the
    ~1,600 objects a small run's checkpoint pickles (its pickling: 0.89 -> 0.67 ms, measured).
    """
    version, words, gauss = random.getstate()
    return {"version": version, "words": torch.tensor(words, dtype=torch.int64), "gauss": gauss}


def _restore_python_rng(state: Any) -> None:
    """Set Python's RNG from :func:`_python_rng`'s dict or, in older checkpoints, the tuple."""
    if isinstance(state, dict):
        state = (state["version"], tuple(state["words"].tolist()), state["gauss"])
    random.setstate(state)
