"""Seeding and determinism.

One seed drives Python's ``random``, NumPy, torch on every device, the data order and the
DataLoader workers, so the same config and seed give the same run, bit for bit, on CPU.
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and every CUDA device).

    Example:
        >>> seed_everything(0); a = torch.rand(1); seed_everything(0)
        >>> bool(torch.equal(a, torch.rand(1)))
        True
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


def set_deterministic(enabled: bool) -> None:
    """Turn deterministic algorithms on or off (off by default: they cost speed).

    On, an op with no deterministic implementation raises instead of silently varying.
    """
    if enabled:
        # cuBLAS needs a fixed workspace to be deterministic; it reads this at init.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # torch's setter imports torch._inductor (about 0.8 s of a process's start) to set
    # its flag too: skipped where nothing would change (off, the default, and inductor's
    # flag not set on by an earlier run of this process).
    inductor = sys.modules.get("torch._inductor.config")
    if (enabled or torch.are_deterministic_algorithms_enabled()
            or (inductor is not None and getattr(inductor, "deterministic", False))):  # fmt: skip
        torch.use_deterministic_algorithms(enabled)
    torch.backends.cudnn.deterministic = enabled
    # Off determinism, cuDNN times its algorithms once per input shape and keeps the
    # fastest (the same choice on every later step of that shape).
    torch.backends.cudnn.benchmark = not enabled
    # oneDNN's bf16 kernels on the CPU (bf16 autocast, chosen by precision=auto where the
    # CPU has native bf16) split reductions over threads as the threads come free: two
    # runs of one seed on a busy machine differed in half the tries, which breaks the
    # exact resume the engine promises. Its deterministic mode cost nothing measurable
    # here (a 3-layer MLP and the digits CNN, bf16 forward+backward), so it is always on.
    # A ContextProp descriptor that sets the flag; torch declares the module attribute as
    # the descriptor itself, so mypy sees a bool assigned to a ContextProp.
    torch.backends.mkldnn.deterministic = True  # type: ignore[assignment]


def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: seed each worker's Python and NumPy RNGs.

    torch already gives each worker a distinct seed (base seed + worker id, the base drawn
    from the loader's seeded generator); Python's and NumPy's RNGs would otherwise be
    copies of the parent's in every worker, so augmentations would repeat across workers.
    """
    worker_seed = torch.initial_seed() % 2**32
    random.seed(worker_seed)
    np.random.seed(worker_seed)


def epoch_seed(seed: int, epoch: int) -> int:
    """A per-epoch seed derived from the run's seed: the data order of an epoch depends on
    nothing else, which is what makes a resumed run see the same batches."""
    return (seed * 1_000_003 + epoch) % 2**63
