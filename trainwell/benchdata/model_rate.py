"""How fast the model eats batches, and whether the data or the model sets the pace.

The model's rate is measured as training steps it: the engine's
:class:`~trainwell.engine.step.stepper.Stepper` (forward, loss, backward, clipping, optimizer
step; the precision ``train.precision`` resolves to on this device), over batches held on
the device already, so no loading is in it. Rates are in the loader's batches (micro-
batches) per second on both sides, so the two compare directly.

Example:
    >>> verdict(40.0, 120.0).sentence
    'the loader gives 40 batches/s, the model takes 120: data-bound, 3.0x'
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

import torch

from trainwell.benchdata.settings import TOLERANCE, rate_text
from trainwell.engine.build.optim import build_optimizer
from trainwell.engine.loading.batch import to_device
from trainwell.engine.step.precision import Precision, resolve_precision
from trainwell.engine.step.stepper import Stepper
from trainwell.errors import UserError

# Timed optimizer steps at the least, and the most time they may take past the budget.
MIN_STEPS = 3
OVERRUN = 3.0


@dataclass
class ModelRate:
    """The model's consumption rate.

    Attributes:
        batches_per_s: micro-batches per second through forward, backward and the
            optimizer (``grad_accum_steps`` of them per optimizer step).
        steps: optimizer steps timed.
        precision: the precision used (fp32, bf16, fp16).
        device: where the model ran.
    """

    batches_per_s: float
    steps: int
    precision: str
    device: str


def model_rate(cfg: Any, parts: Any, device: torch.device, batches: list[Any],
               seconds: float) -> ModelRate:  # fmt: skip
    """Train ``parts.model`` (from :func:`~trainwell.engine.build.parts.build_parts`) on
    ``batches`` for about ``seconds`` and return its rate.

    The weights change; build the parts for this alone. A batch the model cannot take
    is a one-line :class:`UserError`.

    Example:
        >>> from trainwell.config import load_config
        >>> from trainwell.engine.distributed.placement import Placement
        >>> from trainwell.engine.build.parts import build_parts
        >>> cfg = load_config(overrides=["data.name=synthetic", "model.name=mlp"])
        >>> cpu = torch.device("cpu")
        >>> parts = build_parts(cfg, Placement(cpu))
        >>> batch = (torch.randn(8, *parts.splits.input_shape), torch.zeros(8, dtype=torch.long))
        >>> model_rate(cfg, parts, cpu, [batch], 0.05).batches_per_s > 0
        True
    """
    if not batches:
        raise UserError("--model: the loader gave no batch to train on")
    precision = Precision.build(resolve_precision(cfg.train.precision, device), device)
    optimizer = build_optimizer(cfg.optim, parts.model)
    stepper = Stepper(parts.model, parts.steps.train, optimizer, precision, cfg.train.grad_clip,
                      device)  # fmt: skip
    accum = cfg.train.grad_accum_steps
    held = itertools.cycle([to_device(b, device) for b in batches])
    parts.model.train()
    _step(stepper, [next(held) for _ in range(accum)])  # warm-up: allocations, kernels
    _sync(device)
    start = time.perf_counter()
    deadline, hard_stop = start + seconds, start + OVERRUN * seconds
    steps = 0
    while True:
        loss = _step(stepper, [next(held) for _ in range(accum)])
        steps += 1
        now = time.perf_counter()
        if now >= hard_stop or (steps >= MIN_STEPS and now >= deadline):
            break
    float(loss)  # waits for the device to finish the last step
    elapsed = time.perf_counter() - start
    return ModelRate(steps * accum / elapsed, steps, precision.name, str(device))


def _step(stepper: Stepper, micro_batches: list[Any]) -> torch.Tensor:
    try:
        return stepper(micro_batches)
    except (RuntimeError, TypeError, ValueError, IndexError) as exc:
        line = str(exc).strip().splitlines()
        raise UserError(
            f"--model: the config's model cannot train on the loader's batches: "
            f"{type(exc).__name__}: {line[0] if line else ''}"
        ) from exc


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Verdict:
    """Which side sets the pace, and by how much.

    Attributes:
        bottleneck: ``"data"`` when the loader is slower than the model, else ``"model"``.
        factor: the faster rate over the slower one (>= 1).
        sentence: the verdict in words.
    """

    bottleneck: str
    factor: float
    sentence: str


def verdict(loader_per_s: float, model_per_s: float, tolerance: float = TOLERANCE) -> Verdict:
    """Compare the loader's rate with the model's (both in batches per second).

    Example:
        >>> v = verdict(200.0, 50.0)
        >>> v.bottleneck, v.factor, v.sentence.split(": ")[-1]
        ('model', 4.0, 'model-bound, the loader has 4.0x to spare')
        >>> verdict(100.0, 102.0).bottleneck, verdict(100.0, 102.0).sentence.endswith("even")
        ('data', True)
    """
    head = (
        f"the loader gives {rate_text(loader_per_s)} batches/s, "
        f"the model takes {rate_text(model_per_s)}"
    )
    if loader_per_s < model_per_s:
        factor = model_per_s / loader_per_s if loader_per_s > 0 else float("inf")
        tail = f"data-bound, {factor:.1f}x"
        bottleneck = "data"
    else:
        factor = loader_per_s / model_per_s if model_per_s > 0 else float("inf")
        tail = f"model-bound, the loader has {factor:.1f}x to spare"
        bottleneck = "model"
    if factor <= 1 + tolerance:
        tail = "about even"
    return Verdict(bottleneck, factor, f"{head}: {tail}")
