"""The PyTorch Lightning side of ``benchmarks/overhead.py``: the same training through
``lightning.pytorch.Trainer``.

Lightning is an optional benchmark dependency (``pip install -e '.[bench]'``), never a
runtime one: :data:`MISSING` says why this side cannot run, or is ``None``.

The Trainer is set to do the work the other sides do and nothing more: one CPU device,
fp32 (``precision="32-true"``), no checkpointing, no logger, no progress bar, no model
summary, no sanity validation (there is no validation data), no gradient clipping, no
scheduler, ``max_steps`` optimizer steps over the DataLoader it is given. Its training
steps are timed as the hand-written loop's are: per epoch, from ``on_train_epoch_start``
(just before Lightning makes the epoch's data iterator: that ``iter()`` falls inside, a few
microseconds with ``num_workers=0``) to the last ``on_train_batch_end``.
"""

from __future__ import annotations

import importlib.util
import logging
import time
import warnings
from pathlib import Path
from typing import Any

from torch import nn
from torch.utils.data import DataLoader

from trainwell.engine.build.optim import OptimConfig, build_optimizer

MISSING = (
    None
    if importlib.util.find_spec("lightning") is not None
    else "lightning is not installed (pip install -e '.[bench]')"
)


def train_lightning(model: nn.Module, loader: DataLoader, steps: int, root: Path) -> float:
    """Train ``model`` for ``steps`` steps with Lightning's Trainer; returns the seconds of
    its training steps (see the module docstring). ``root`` takes whatever Lightning
    writes (nothing, as set up here)."""
    import lightning.pytorch as pl  # only here: the import is slow, and optional

    # Lightning's notes on the run ("GPU available: False", tips, the advice to use more
    # DataLoader workers, which the other sides do not use either) would fill the output.
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.loss_fn = nn.CrossEntropyLoss()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return self.loss_fn(self.model(x), y)

        def configure_optimizers(self) -> Any:
            # AdamW with trainwell's two parameter groups, as on every other side.
            return build_optimizer(OptimConfig(), self.model)

    class StepTimer(pl.Callback):
        """Per epoch: [start of the epoch, end of its last training batch]."""

        def __init__(self) -> None:
            self.spans: list[list[float]] = []

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            now = time.perf_counter()
            self.spans.append([now, now])

        def on_train_batch_end(self, *args: Any) -> None:
            self.spans[-1][1] = time.perf_counter()

    timer = StepTimer()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        precision="32-true",
        max_steps=steps,
        max_epochs=-1,  # as many epochs as the steps need
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[timer],
        default_root_dir=root,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        # Lightning 2.6 on a newer torch: a deprecation notice from its own pytree use.
        warnings.filterwarnings("ignore", message=".*LeafSpec.*")
        trainer.fit(Module(), train_dataloaders=loader)
    if trainer.global_step != steps:
        raise SystemExit(f"Lightning ran {trainer.global_step} steps; expected {steps}")
    return sum(end - start for start, end in timer.spans)
