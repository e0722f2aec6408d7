"""Mixed precision: choose the dtype, and give the loop its autocast context and scaler.

``auto`` picks bf16 where the device runs it fast (CUDA with bf16 support; CPUs with AMX or
AVX-512 bf16), fp16 with a GradScaler on CUDA devices without bf16, and fp32 elsewhere:
on a plain AVX2 CPU, bf16 autocast is several times slower than fp32.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def resolve_precision(requested: str, device: torch.device) -> str:
    """The concrete precision (fp32, bf16 or fp16) that ``requested`` means on ``device``.

    Example:
        >>> resolve_precision("fp16", torch.device("cpu"))
        'fp16'
    """
    if requested != "auto":
        return requested
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if device.type == "cpu":
        from trainwell.env import cpu_has_fast_bf16

        return "bf16" if cpu_has_fast_bf16() else "fp32"
    return "fp32"


@dataclass
class Precision:
    """The autocast context and GradScaler of a run, built once from the resolved precision.

    Example:
        >>> p = Precision.build("fp32", torch.device("cpu"))
        >>> p.scaler is None
        True
    """

    name: str
    device_type: str
    dtype: torch.dtype | None
    scaler: torch.amp.GradScaler | None

    @classmethod
    def build(cls, name: str, device: torch.device) -> Precision:
        dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[name]
        # fp16's narrow range needs loss scaling; bf16 has fp32's range and does not. The
        # device is named explicitly: a bare GradScaler() silently disables itself
        # without CUDA.
        scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
        return cls(name, device.type, dtype, scaler)

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast for the forward pass and loss; a no-op context for fp32."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)
