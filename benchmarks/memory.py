"""Peak memory of a training step with ``model.activation_checkpointing=true``, next to
without, and the time it costs.

What is measured
----------------
Both sides train the same small decoder-only transformer language model
(``benchmarks/_tiny_lm.py``: token and position embeddings, 4 pre-norm blocks of causal
self-attention and a 4x GELU MLP in an ``nn.ModuleList``, width 128, sequences of 128
tokens, batch 16) on random tokens through the engine, ``trainwell.fit(cfg, model=...,
train_data=..., step_fn=...)``: fp32, AdamW, a constant learning rate, one epoch, no
validation, the doctor off. **plain** uses the engine's defaults; **activation
checkpointing** adds ``model.activation_checkpointing=true``, with which the engine
recomputes each block's activations in backward instead of keeping them from the forward
(``trainwell/engine/distributed/compiling.py``: ``checkpoint_activations`` over ``repeated_blocks``,
the children of the largest ``ModuleList``: here the 4 blocks).

**Memory** is measured on the very module each side's first ``fit`` trained (the engine's
model: on one process its wrapped model is the model itself, with activation checkpointing
applied by ``fit`` on that side), by one plain forward and backward of one training batch,
gradients cleared to ``None`` first:

- **peak tensor MiB** (any device): the most bytes of tensors alive at once during the
  forward and backward, counted by a ``TorchDispatchMode`` that sees every operator
  below autograd, forward, backward and the checkpoint's recomputation alike: each output
  whose storage is new (not an input's: views and in-place results are not) adds its
  storage's bytes once, and a finalizer on the storage takes them off when it is freed.
  Weights and the batch, there before the step, are not counted; the gradients made in
  backward are. Chosen over counting what ``saved_tensors_hooks`` packs, which misses
  what checkpointing itself holds (its own nested hooks take the region's tensors, and
  the blocks' inputs are kept outside any hook) and the activations recomputed in
  backward; and over the profiler's memory events, whose allocations are spread over the
  operator tree and bring the profiler's own noise.
- **CUDA peak MiB** (on CUDA only): ``torch.cuda.max_memory_allocated()`` over the step,
  minus what was allocated before it (the counters reset before each side). On CUDA this
  is the figure in the ratio; on the CPU those counters read 0, and the ratio uses the
  peak tensor figure.
- the **process peak RSS** (``getrusage``) is printed for information: one figure for the
  whole process (both sides, trainwell, torch itself), so it says little about either side.

**Time** is steps/s of ``trainwell.fit`` both ways, from the end of the first step to the
end of the last but one (a callback at ``on_step_end``; the first step's one-off costs and
the last one's log point left out: see ``benchmarks/_tiny_lm.py``), in interleaved runs
(the order swapped each repeat) after a warm-up run of each; medians. On a CPU, torch uses
one thread by default (``--threads``); with CUDA (``--device auto``, the default, takes it
when there) everything runs on the GPU. Run directories go to a temporary folder that is
removed afterwards.

How to run
----------
::

    python benchmarks/memory.py            # about two minutes on a 2-core CPU
    python benchmarks/memory.py --quick    # a smoke run of a few seconds
    python benchmarks/memory.py --seq 512 --layers 8 --steps 20

The last lines read ``ratio (checkpointed / plain, peak memory): 0.35`` and
``ratio (checkpointed / plain, steps/s): 0.75``. Memory and speed are measured here,
never asserted.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any

import torch
from _tiny_lm import (
    Size,
    Timing,
    add_common_args,
    device_name,
    fit_run,
    lm_step,
    medians,
    positive_int,
    size_from,
    steps_arg,
    token_data,
    typical_ratio,
)
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import trainwell
from trainwell.engine.distributed.placement import resolve_device

PLAIN = "plain"
CHECKPOINTED = "activation checkpointing"
SIDES = (PLAIN, CHECKPOINTED)
DEFAULT = Size(layers=4, dim=128, heads=4, seq=128, vocab=512, batch=16)
QUICK = Size(layers=2, dim=32, heads=2, seq=16, vocab=64, batch=4)
MIB = 2**20


class LiveTensorBytes(TorchDispatchMode):
    """Bytes of the tensors created under this mode and still alive: ``now`` and ``peak``.

    Each operator's outputs whose storage is not one of its inputs' (a view or an in-place
    result shares it) are new memory: their storage's bytes count once, until a finalizer
    on the storage sees it freed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now = self.peak = 0
        self.live: dict[int, int] = {}  # data_ptr -> bytes, for the storages counted

    def _freed(self, ptr: int) -> None:
        self.now -= self.live.pop(ptr)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
        }
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            ptr, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or ptr in inputs or ptr in self.live:
                continue
            self.live[ptr] = size
            self.now += size
            self.peak = max(self.peak, self.now)
            weakref.finalize(storage, self._freed, ptr)
        return out


def step_memory(model: nn.Module, size: Size, device: torch.device) -> dict[str, float]:
    """Peak MiB of one forward and backward of one batch: counted tensors, and on CUDA the
    allocator's peak over what was allocated before."""
    ids, labels = (t.to(device) for t in token_data(size, size.batch).tensors)
    model.train()
    model.zero_grad(set_to_none=True)
    gc.collect()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    with LiveTensorBytes() as counted:
        lm_step(model, [ids, labels]).backward()
    figures = {"tensors": counted.peak / MIB}
    if cuda:
        torch.cuda.synchronize(device)
        figures["cuda"] = (torch.cuda.max_memory_allocated(device) - before) / MIB
    model.zero_grad(set_to_none=True)
    return figures


def peak_rss_mib() -> float | None:
    """The process's peak resident set size (None where ``resource`` is missing)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024  # bytes there, KiB here


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Peak memory and steps/s of trainwell.fit with activation checkpointing."
    )
    parser.add_argument("--steps", type=steps_arg, default=30, help="steps per timed run")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed runs per side")
    add_common_args(parser, DEFAULT)
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: a tiny model, 6 steps, one run a side"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 6, 1
        args.layers, args.dim, args.heads = QUICK.layers, QUICK.dim, QUICK.heads
        args.seq, args.vocab, args.batch_size = QUICK.seq, QUICK.vocab, QUICK.batch
    if args.layers < 2:
        raise SystemExit("--layers must be at least 2: the engine checkpoints repeated blocks")
    return args


def measure(
    args: argparse.Namespace, size: Size, device: torch.device, tmp: Path
) -> tuple[dict[str, list[Timing]], dict[str, dict[str, float]]]:
    """Each side's runs over the repeats, and its step memory (first run's model)."""
    rates: dict[str, list[Timing]] = {side: [] for side in SIDES}
    memory: dict[str, dict[str, float]] = {}
    run_dirs = (tmp / f"run-{i}" for i in range(10**9))

    def run(side: str, steps: int) -> Timing:
        gc.collect()
        extra = ["model.activation_checkpointing=true"] if side == CHECKPOINTED else []
        result = fit_run(size, steps, next(run_dirs), device, extra)
        if side == CHECKPOINTED and "activation checkpointing:" not in result.output:
            raise SystemExit("the engine did not say it checkpoints activations:\n" + result.output)
        if side not in memory:
            memory[side] = step_memory(result.model, size, device)
        return result.timing

    if not args.quick:
        for side in SIDES:  # imports, allocator, first calls: not timed
            run(side, min(args.steps, 5))
    for r in range(args.repeats):
        # Swapped order, so that neither side always runs right after the other.
        for side in SIDES[r % 2 :] + SIDES[: r % 2]:
            rates[side].append(run(side, args.steps))
    return rates, memory


def report(
    args: argparse.Namespace,
    size: Size,
    device: torch.device,
    rates: dict[str, list[Timing]],
    memory: dict[str, dict[str, float]],
) -> None:
    cuda = device.type == "cuda"
    print(f"trainwell {trainwell.__version__}, torch {torch.__version__}")
    print(f"device: {device_name(device)}")
    print(
        f"{size.describe()}; AdamW, fp32; memory: one forward+backward; time: "
        f"{args.steps} steps x {args.repeats} repeats{'' if args.quick else ' after a warm-up'}"
        "; medians"
    )
    print()
    head = f"{'':26} {'peak tensor MiB':>16}" + (f" {'CUDA peak MiB':>14}" if cuda else "")
    print(f"{head} {'steps/s':>8} {'ms/step':>8} {'min-max':>11} {'typical step ms':>16}")
    for side in SIDES:
        m = memory[side]
        line = f"{side:26} {m['tensors']:16.2f}" + (f" {m['cuda']:14.2f}" if cuda else "")
        rate, spread, typical = medians(rates[side])
        print(f"{line} {rate:8.2f} {1e3 / rate:8.2f} {spread:>11} {typical:>16}")
    rss = peak_rss_mib()
    print()
    print("peak tensor MiB: the most bytes of tensors alive at once in the step (activations,")
    print("  what checkpointing keeps and recomputes, gradients), weights and batch excluded")
    if rss is not None:
        print(f"process peak RSS: {rss:.0f} MiB (the whole process, both sides; information)")
    key = "cuda" if cuda else "tensors"
    print(f"peak memory in the ratio: {'CUDA allocator peak' if cuda else 'peak tensor MiB'}")
    ratio = memory[CHECKPOINTED][key] / memory[PLAIN][key]
    print(f"ratio (checkpointed / plain, peak memory): {ratio:.3f}")
    typical = typical_ratio(rates[CHECKPOINTED], rates[PLAIN])
    if typical is not None:
        print(f"ratio (checkpointed / plain, typical step speed): {typical:.3f}")
    speed = medians(rates[CHECKPOINTED])[0] / medians(rates[PLAIN])[0]
    print(f"ratio (checkpointed / plain, steps/s): {speed:.3f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    size = size_from(args)
    with tempfile.TemporaryDirectory(prefix="trainwell-bench-") as tmp:
        rates, memory = measure(args, size, device, Path(tmp))
    report(args, size, device, rates, memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
