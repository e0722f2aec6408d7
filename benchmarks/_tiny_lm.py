"""What ``benchmarks/compile.py`` and ``benchmarks/memory.py`` share: a small
decoder-only transformer language model on synthetic tokens, and one timed
``trainwell.fit`` run of it.

Not a benchmark itself. The model is GPT-style (token and position embeddings, pre-norm blocks
of causal self-attention and a 4x GELU MLP, a final norm and a head) small enough to train
in seconds on a CPU, and a data set of random token sequences whose labels are the inputs
shifted by one. It is the kind of model where ``torch.compile`` matters (many small
elementwise ops around the matmuls for Inductor to fuse) and where activations, not
weights, fill the memory (what activation checkpointing trades for time).

A run's steps/s is timed by a callback at ``on_step_end``: from the end of the first step
to the end of the last but one, so that the first step (where ``torch.compile`` compiles,
and where eager PyTorch pays its own first-call costs) and the last (the run's one log
point, ``train.log_every`` = the steps: 0.1-0.2 s on a CPU, where the engine's memory
sample walks the Python heap) are left out on every side alike, and so are set-up and
the end-of-epoch checkpoint. The typical step is the median time between two step ends:
the steady state, free of the bursts of a busy machine. On CUDA the callback synchronizes
at those two steps only, so that the clock reads finished work without stalling the steps
between; the typical step is not given there.
"""

from __future__ import annotations

import argparse
import io
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from rich.console import Console
from torch import nn
from torch.utils.data import TensorDataset

import trainwell

SEED = 0


@dataclass(frozen=True)
class Size:
    """The model's and the batch's dimensions."""

    layers: int = 4
    dim: int = 128
    heads: int = 4
    seq: int = 128
    vocab: int = 512
    batch: int = 16

    def describe(self) -> str:
        return (
            f"{self.layers}-layer decoder, dim {self.dim}, {self.heads} heads, vocab "
            f"{self.vocab}, sequence {self.seq}, batch {self.batch}"
        )


class Block(nn.Module):
    """Pre-norm causal self-attention and MLP, each with a residual.

    The MLP is two named Linear layers, not an ``nn.Sequential``: the engine's activation
    checkpointing wraps the children of the model's largest ``ModuleList``/``Sequential``,
    which must be the blocks.
    """

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(dim, dim=2)
        q, k, v = (t.view(n, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(n, length, dim))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyLM(nn.Module):
    """Tokens ``(N, L)`` -> next-token logits ``(N, L, vocab)``."""

    def __init__(self, size: Size) -> None:
        super().__init__()
        self.embed = nn.Embedding(size.vocab, size.dim)
        self.pos = nn.Embedding(size.seq, size.dim)
        self.blocks = nn.ModuleList(Block(size.dim, size.heads) for _ in range(size.layers))
        self.norm = nn.LayerNorm(size.dim)
        self.head = nn.Linear(size.dim, size.vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.embed(ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def make_model(size: Size, seed: int = 0) -> TinyLM:
    """The same initial weights on every side."""
    torch.manual_seed(seed)
    return TinyLM(size)


def token_data(size: Size, samples: int, seed: int = 0) -> TensorDataset:
    """``samples`` random sequences; labels are the inputs shifted left by one."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(size.vocab, (samples, size.seq + 1), generator=g)
    return TensorDataset(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())


def lm_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """The engine's step function: forward and next-token cross-entropy."""
    ids, labels = batch
    logits = model(ids)
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def device_name(device: torch.device) -> str:
    """The CUDA device's name, or the CPU's model from /proc/cpuinfo (where there is one)."""
    if device.type == "cuda":
        return f"CUDA: {torch.cuda.get_device_name(device)}"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                         "unknown model")  # fmt: skip
    except OSError:  # not Linux
        model = platform.processor() or "unknown model"
    return f"CPU: {model}, {torch.get_num_threads()} torch thread(s)"


class Timing(NamedTuple):
    """The speed of one run."""

    steps_per_s: float  # steps 2..N-1 (see the module docstring)
    typical_s: float | None  # the median step of 2..N-1; None on CUDA (see StepStamps)


class Run(NamedTuple):
    """One ``trainwell.fit`` run."""

    timing: Timing
    summary: dict[str, Any]  # summary.json
    model: nn.Module  # the module the engine trained (activation checkpointing applied)
    output: str  # what fit printed


class StepStamps:
    """A trainwell callback: the clock at the end of every step.

    On CUDA it synchronizes at the first and the last but one step only (the steps' work
    done, not just queued): the stamps between measure the launches, not the GPU, and the
    typical step is left out there.
    """

    def __init__(self, steps: int, device: torch.device) -> None:
        self.steps, self.cuda = steps, device.type == "cuda"
        self.device = device
        self.stamps: list[float] = []

    def on_step_end(self, ctx: Any) -> None:
        if self.cuda and ctx.step in (1, self.steps - 1):
            torch.cuda.synchronize(self.device)
        self.stamps.append(time.perf_counter())

    def timing(self) -> Timing:
        """Steps/s over steps 2..N-1, and their median step in seconds (None on CUDA)."""
        s = self.stamps[:-1]  # the last step holds the run's log point
        # The median step shrugs off the bursts of a busy machine that the mean takes in.
        typical = None if self.cuda else statistics.median(b - a for a, b in zip(s, s[1:]))
        return Timing((len(s) - 1) / (s[-1] - s[0]), typical)


def fit_run(size: Size, steps: int, run_dir: Path, device: torch.device, extra: list[str]) -> Run:
    """``trainwell.fit`` of a fresh model for ``steps`` steps (one epoch), fp32, AdamW, a
    constant learning rate, no validation, the doctor off; ``extra`` overrides on top."""
    overrides = [
        f"run.dir={run_dir}",
        f"run.seed={SEED}",
        f"run.device={device}",
        f"data.batch_size={size.batch}",
        "data.num_workers=0",
        "train.precision=fp32",
        "train.epochs=1",
        f"train.max_steps={steps}",
        f"train.log_every={steps}",  # one log point (a sync on CUDA), at the end
        "sched.name=constant",
        "early_stop.patience=0",
        "checkpoint.every_steps=0",
        "doctor.enabled=false",
        *extra,
    ]
    cfg = trainwell.load_config(overrides=overrides)
    stamps = StepStamps(steps, device)
    text = io.StringIO()
    result = trainwell.fit(
        cfg,
        model=make_model(size),
        train_data=token_data(size, steps * size.batch),
        step_fn=lm_step,
        callbacks=[stamps],
        console=Console(file=text, width=200),  # quiet, no progress bar; read for warnings
    )
    summary = result.summary
    if summary.get("steps") != steps or len(stamps.stamps) != steps:
        raise SystemExit(f"trainwell.fit ran {summary.get('steps')} steps; expected {steps}")
    assert result.model is not None
    return Run(stamps.timing(), summary, result.model, text.getvalue())


def medians(timings: list[Timing]) -> tuple[float, str, str]:
    """A table row's cells: median steps/s, their min-max, the median typical step in ms
    ("-" on CUDA)."""
    rates = [t.steps_per_s for t in timings]
    typical = [t.typical_s for t in timings if t.typical_s is not None]
    shown = f"{1e3 * statistics.median(typical):.2f}" if typical else "-"
    return statistics.median(rates), f"{min(rates):.2f}-{max(rates):.2f}", shown


def typical_ratio(a: list[Timing], b: list[Timing]) -> float | None:
    """Speed of ``a`` over ``b`` by their median typical steps (None on CUDA)."""
    ta = [t.typical_s for t in a if t.typical_s is not None]
    tb = [t.typical_s for t in b if t.typical_s is not None]
    return statistics.median(tb) / statistics.median(ta) if ta and tb else None


def steps_arg(text: str) -> int:
    """``--steps``: at least 3, as the first and the last step are not timed."""
    value = int(text)
    if value < 3:
        raise argparse.ArgumentTypeError(f"must be at least 3 (2 steps are not timed); got {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text}")
    return value


def add_common_args(parser: argparse.ArgumentParser, size: Size) -> None:
    """The model's size, the device and the threads: the same flags on both benchmarks."""
    parser.add_argument("--layers", type=positive_int, default=size.layers)
    parser.add_argument("--dim", type=positive_int, default=size.dim)
    parser.add_argument("--heads", type=positive_int, default=size.heads)
    parser.add_argument("--seq", type=positive_int, default=size.seq, help="tokens per sample")
    parser.add_argument("--vocab", type=positive_int, default=size.vocab)
    parser.add_argument("--batch-size", type=positive_int, default=size.batch)
    parser.add_argument("--device", default="auto", help="auto (CUDA when there), cpu, cuda")
    # One thread by default, as benchmarks/overhead.py: on a small shared CPU, a second
    # intra-op thread competes with the Python thread and with other processes, and the
    # timings turn noisy (measured here: 5 ms steps that sometimes took 200 ms).
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads (CPU)")


def size_from(args: argparse.Namespace) -> Size:
    if args.dim % args.heads:
        raise SystemExit(f"--dim {args.dim} must be a multiple of --heads {args.heads}")
    return Size(args.layers, args.dim, args.heads, args.seq, args.vocab, args.batch_size)
