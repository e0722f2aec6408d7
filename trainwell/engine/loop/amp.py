"""Mixed precision as the user sees it: the line that names the precision and why, and
``train.fp32_modules``, the modules that run in fp32 inside autocast.

The articles' advice is to get a new model working in fp32 first and then turn AMP on, and
to keep numerically sensitive layers (a loss head, a softmax over many classes, a norm) in
fp32 under it. The first needs the run to say which precision it chose and how to turn it
off; the second needs a way to name those layers without editing the model.
"""

from __future__ import annotations

import fnmatch
import functools
from typing import Any

import torch
from torch import nn

from trainwell.errors import UserError

_WHY_AUTO = {
    ("cuda", "bf16"): "this GPU computes bf16",
    ("cuda", "fp16"): "this GPU has no bf16, so fp16 with a GradScaler",
    ("cpu", "bf16"): "this CPU computes bf16 natively, with AVX-512 BF16 or AMX",
    ("cpu", "fp32"): "no native bf16 on this CPU, where it is slower than fp32",
}


def precision_line(requested: str, resolved: str, device: torch.device) -> str:
    """The run's first word on numerics: the precision, why it was chosen, and the switch.

    Example:
        >>> precision_line("auto", "fp32", torch.device("cpu"))
        'precision: fp32 (auto: no native bf16 on this CPU, where it is slower than fp32)'
        >>> precision_line("bf16", "bf16", torch.device("cpu"))
        'precision: bf16 (train.precision=bf16); train.precision=fp32 to debug numerics'
    """
    if requested == "auto":
        why = "auto: " + _WHY_AUTO.get((device.type, resolved), f"the default on {device.type}")
    else:
        why = f"train.precision={requested}"
    line = f"precision: {resolved} ({why})"
    if resolved != "fp32":
        line += "; train.precision=fp32 to debug numerics"
    return line


def keep_fp32(model: nn.Module, globs: list[str], device_type: str) -> list[str]:
    """Run the modules whose names match ``globs`` in fp32 inside autocast: their forward
    runs with autocast off and floating inputs cast to float32. Returns their names.

    A glob that matches no module is one line (a typo would otherwise leave the layer in
    low precision, silently). The modules' parameters and state dicts are untouched.

    Example:
        >>> net = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
        >>> keep_fp32(net, ["1"], "cpu")
        ['1']
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     net(torch.ones(2, 4)).dtype
        torch.float32
    """
    named = dict(model.named_modules())
    chosen: list[str] = []
    for glob in globs:  # strings: TrainConfig checked them
        matched = [name for name in named if name and fnmatch.fnmatchcase(name, glob)]
        if not matched:
            shown = ", ".join(name for name in list(named)[1:9])
            raise UserError(
                f"train.fp32_modules: {glob!r} matches no module of the model (its modules: "
                f"{shown}{', ...' if len(named) > 9 else ''})"
            )
        chosen += [name for name in matched if name not in chosen]
    for name in chosen:
        _wrap_forward(named[name], device_type)
    return chosen


def _wrap_forward(module: nn.Module, device_type: str) -> None:
    if getattr(module, "_trainwell_fp32", False):
        return
    inner = module.forward

    @functools.wraps(inner)
    def forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type, enabled=False):
            return inner(*_to_fp32(args), **_to_fp32(kwargs))

    # An instance attribute: nn.Module.__call__ calls self.forward, hooks and all.
    module.forward = forward
    module._trainwell_fp32 = True  # type: ignore[assignment]


def _to_fp32(value: Any) -> Any:
    """Low-precision floating tensors (autocast's outputs) back to float32, in containers too."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype in (torch.float16, torch.bfloat16) else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_to_fp32(v) for v in value))
    if isinstance(value, tuple | list):
        return type(value)(_to_fp32(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_fp32(v) for k, v in value.items()}
    return value


def amp_metrics(scaler: torch.amp.GradScaler | None, skipped: torch.Tensor) -> dict[str, float]:
    """fp16's figures at a log point: the GradScaler's scale (``train/amp_scale``; falling
    scales mean overflowing gradients) and the optimizer steps it skipped so far
    (``train/amp_skipped``). Nothing for bf16 and fp32, which need no scaler.

    Example:
        >>> amp_metrics(None, torch.zeros(()))
        {}
    """
    if scaler is None:
        return {}
    return {"train/amp_scale": float(scaler.get_scale()), "train/amp_skipped": float(skipped)}


def fp32_modules(
    model: nn.Module, globs: list[str], precision: str, device: torch.device, say: Any
) -> list[str]:
    """``train.fp32_modules`` for a run: checked always (a typo is news in fp32 too),
    applied and named in one line under bf16 or fp16, where autocast is on."""
    if not globs:
        return []
    chosen = keep_fp32(model, globs, device.type)
    if precision != "fp32":
        shown = ", ".join(chosen[:6]) + (f" and {len(chosen) - 6} more" if len(chosen) > 6 else "")
        say(f"train.fp32_modules: {shown} run in fp32 under {precision} autocast",
            highlight=False, markup=False)  # fmt: skip
    return chosen
