"""The training loop's own config (the loop itself is
:class:`trainwell.engine.loop.trainer.Trainer`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainwell._options import check, check_choice, check_int, check_number, option
from trainwell.engine.build.metric_objects import check_metric_specs
from trainwell.engine.step.precision import PRECISIONS
from trainwell.imports import is_import_path

# The losses train.loss names; anything else is an import path.
LOSS_NAMES = ("cross_entropy", "mse", "l1", "smooth_l1", "bce_with_logits")
# torch.compile's modes (torch._inductor.list_mode_options()).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass
class TrainConfig:
    """How long and how to train."""

    epochs: int = option(20, "passes over the training data")
    max_steps: int = option(0, "stop after this many optimizer steps (0: no limit)")
    grad_accum_steps: int = option(1, "micro-batches accumulated per optimizer step")
    grad_clip: float = option(1.0, "clip the gradients' global norm to this (0: off)")
    precision: str = option("auto", "auto, fp32, bf16 or fp16 (fp16 uses a GradScaler)")
    fp32_modules: list[str] = option(
        [], "module-name globs (e.g. head, '*.norm') that run in fp32 inside autocast"
    )
    loss: str = option(
        "cross_entropy",
        f"{', '.join(LOSS_NAMES)}, or import path 'package.module:attr' of a loss class or "
        "function (used by the default step)",
    )
    loss_kwargs: dict[str, Any] = option(
        {}, "keyword arguments for the loss (ignore_index, pos_weight, weight, reduction, ...)"
    )
    step: str = option(
        "",
        "import path 'package.module:fn' of a step function fn(model, batch) -> loss or "
        "{'loss': ..., 'metric': ...}; empty: the loss on (input, target) batches",
    )
    eval_step: str = option(
        "", "import path of the step for evaluation; empty: the training step, without grad"
    )
    metrics: dict[str, Any] = option(
        {},
        "metric objects over a whole split: NAME: {name: 'package.module:Cls', kwargs: {...}} "
        "with update(preds, target), compute(), reset() (torchmetrics' fit as they are); "
        "fed every eval batch, logged as val/NAME and test/NAME, monitorable",
    )
    step_kwargs: dict[str, Any] = option(
        {}, "keyword arguments bound to train.step: fn(model, batch, **step_kwargs)"
    )
    eval_step_kwargs: dict[str, Any] = option(
        {}, "keyword arguments bound to train.eval_step (without it, the train step keeps its own)"
    )
    label_smoothing: float = option(0.0, "label smoothing for cross_entropy")
    log_every: int = option(10, "log the training loss every this many optimizer steps")
    eval_every: int = option(1, "evaluate every this many epochs")
    compile: bool = option(False, "torch.compile the model (compile time is reported apart)")
    compile_mode: str = option(
        "default", "torch.compile mode: default, reduce-overhead, max-autotune, ..."
    )
    profile: bool = option(
        False, "torch.profiler over a few steps after warm-up: trace and top ops in the run dir"
    )

    def __post_init__(self) -> None:
        check_int(self.epochs, "train.epochs")
        check_int(self.max_steps, "train.max_steps", low=0)
        check_int(self.grad_accum_steps, "train.grad_accum_steps")
        check_number(self.grad_clip, "train.grad_clip", low=0)
        check_choice(self.precision, "train.precision", PRECISIONS)
        check(
            isinstance(self.fp32_modules, list)
            and all(isinstance(g, str) and g for g in self.fp32_modules),
            "train.fp32_modules",
            f"expected a list of module-name globs; got {self.fp32_modules!r}",
        )
        check_number(self.label_smoothing, "train.label_smoothing", 0, 1, high_open=True)
        check_int(self.log_every, "train.log_every")
        check_int(self.eval_every, "train.eval_every")
        check_choice(self.compile_mode, "train.compile_mode", COMPILE_MODES)
        check(
            self.loss in LOSS_NAMES or is_import_path(self.loss),
            "train.loss",
            f"unknown loss {self.loss!r}; built-in: {', '.join(LOSS_NAMES)}, or an import "
            "path 'package.module:attr'",
        )
        check_metric_specs(self.metrics)
        for key, value in (("train.step", self.step), ("train.eval_step", self.eval_step)):
            check(
                not value or is_import_path(value),
                key,
                f"{value!r} is not an import path 'package.module:fn'",
            )
        bound = (("step", self.step, self.step_kwargs),
                 ("eval_step", self.eval_step, self.eval_step_kwargs))  # fmt: skip
        for key, path, kwargs in bound:
            where = f"train.{key}_kwargs"
            check(isinstance(kwargs, dict), where, f"expected a mapping, got {kwargs!r}")
            check(not kwargs or bool(path), where, f"given without train.{key} (the keywords "
                  "are bound to that import path's function)")  # fmt: skip
