"""``--dry-run``: one real training step and one eval batch, then a picture of the run.

Shapes, parameter counts, the batch split, the schedule and the step's outputs, printed
before anything is written, so a config can be checked in seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from rich.console import Console

from trainwell.config import Config
from trainwell.datacheck.dry_run import dry_run_data_line
from trainwell.engine.loading.batch import describe, sample_count, to_device
from trainwell.engine.step.step_fn import split_pair, unpack
from trainwell.engine.tools.module_table import ModuleOutputs

if TYPE_CHECKING:
    from trainwell.engine.build.parts import Parts
    from trainwell.engine.loop.assembly import Assembly


def dry_run_report(console: Console, cfg: Config, parts: Parts, trainer: Assembly) -> None:
    """Run one forward/backward on a real batch (no optimizer step) and one eval batch."""
    model, place = trainer.model, trainer.place
    precision = trainer.stepper.precision
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    batch = next(trainer.data.epoch(0))[0]
    inspect = trainer.check_labels
    if inspect is not None:
        inspect(batch)
    model.train()
    moved = to_device(batch, place.device)
    outputs = None
    out: Any  # a loss tensor, or the step function's dict with one
    with precision.autocast(), ModuleOutputs(model) as table:
        if parts.steps.loss_fn is not None:
            # The loss-built step, spelled out to show the model's outputs too.
            inputs, targets = split_pair(moved)
            outputs = trainer.stepper.net(inputs)
            out = parts.steps.loss_fn(outputs, targets)
        else:
            out = parts.steps.train(trainer.stepper.net, moved)
    loss, metrics, _ = unpack(out, sample_count(moved), "train.step")
    loss.backward()
    grads = sum(1 for p in model.parameters() if p.grad is not None)
    model.zero_grad(set_to_none=True)
    data = trainer.data
    split = (
        f"global {cfg.data.batch_size} = {data.micro_batch} per micro-step x "
        f"{cfg.train.grad_accum_steps} accum x {place.world_size} processes"
        if data.owned
        else data.batch_plan(cfg.data.batch_size, place.world_size)
    )
    per_epoch = "unknown (iterable)" if data.steps_per_epoch is None else data.steps_per_epoch
    lines = [
        f"model        {type(model).__name__}: {total:,} parameters ({trainable:,} trainable)",
        f"device       {place.device}, precision {precision.name}",
        f"batch        {split}",
        f"schedule     {per_epoch} steps/epoch, {trainer.total_steps} optimizer steps",
        f"train batch  {describe(batch)}",
        *([f"outputs      {describe(outputs)}"] if outputs is not None else []),
        f"step         {_values(metrics)}; {grads} of {sum(1 for _ in model.parameters())} "
        "parameter tensors got gradients",
    ]
    if trainer.val_loader is not None:
        v_batch = next(iter(trainer.val_loader))
        model.eval()
        with torch.inference_mode(), precision.autocast():
            v_out = parts.steps.eval(model, to_device(v_batch, place.device))
        model.train()
        _, v_metrics, _ = unpack(v_out, sample_count(v_batch), "train.eval_step")
        lines.append(f"eval batch   {describe(v_batch)}; {_values(v_metrics)}")
    else:
        lines.append("eval batch   no validation data")
    lines += [dry_run_data_line(cfg, parts), "modules", *("  " + line for line in table.lines())]
    console.print("[bold]dry run[/]: one training and one eval batch went through", highlight=False)
    for line in lines:
        console.print("  " + line, highlight=False, markup=False)


def _values(metrics: dict[str, Any]) -> str:
    def value(v: Any) -> float:
        if isinstance(v, tuple):  # a ratio metric: (numerator, denominator)
            return float(v[0]) / max(float(v[1]), 1e-12)
        return float(v.detach())

    return ", ".join(f"{k} {value(v):.4f}" for k, v in metrics.items())
