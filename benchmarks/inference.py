"""Inference latency and throughput of the default CNN: eager PyTorch, TorchScript and
ONNX Runtime, at batch 1 and batch 64, in one run.

What is measured
----------------
The model is ``trainwell.models.simple_cnn`` as ``trainwell train`` builds it by default
(10 classes, 8x8 single-channel digits), in eval mode, fed the scikit-learn digits' test
images. The three forms are the ones ``trainwell export`` writes:

- **eager PyTorch**: ``model(x)`` under ``torch.inference_mode()``;
- **TorchScript**: ``torch.jit.trace`` of the model (as ``--format torchscript``), under
  ``torch.inference_mode()``;
- **ONNX Runtime**: the ONNX file written by trainwell's exporter (dynamic batch axis),
  in an ``onnxruntime.InferenceSession`` on the CPU execution provider with default
  graph optimizations; input and output as numpy arrays (conversion included).

Every form uses the same number of intra-op threads (``--threads``, default: torch's
own count), set on torch and on the ONNX Runtime session alike. After a warm-up, each
(form, batch size) is timed call by call for ``--seconds``; rounds alternate the forms so
that machine noise hits each alike, and the table gives the median latency per call, its
90th percentile, and the throughput (batch size / median latency). The outputs of the
three forms are compared first (max abs difference), so a fast but wrong form shows.

How to run
----------
::

    python benchmarks/inference.py            # about half a minute on a 2-core CPU
    python benchmarks/inference.py --quick    # a few seconds: a smoke run

Needs the ``trainwell[onnx]`` extra. The last lines read
``ratio (ONNX Runtime / eager, batch 1 samples/s): ..`` and the same for batch 64.
Speed is measured here, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from trainwell.data.digits import load_digits_splits
from trainwell.export.onnx_file import require_onnx, write_onnx
from trainwell.models import simple_cnn

BATCHES = (1, 64)
FORMS = ("eager PyTorch", "TorchScript", "ONNX Runtime")


def build_forms(folder: Path, threads: int) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """The three forms of one model, each a function numpy batch -> numpy logits."""
    _, ort = require_onnx()
    torch.manual_seed(0)
    model = simple_cnn(10, (1, 8, 8)).eval()
    example = torch.zeros(4, 1, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit's deprecation note
        traced = torch.jit.trace(model, (example,))
    path = folder / "model.onnx"
    write_onnx(model, {"input": example}, ["logits"], {"input": [0]}, path, None)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def torch_form(module: Callable) -> Callable[[np.ndarray], np.ndarray]:
        def run(x: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return module(torch.from_numpy(x)).numpy()

        return run

    return {
        FORMS[0]: torch_form(model),
        FORMS[1]: torch_form(traced),
        FORMS[2]: lambda x: session.run(None, {"input": x})[0],
    }


def inputs(batch: int) -> np.ndarray:
    """``batch`` real test images (repeated when the test split is smaller)."""
    _, _, test = load_digits_splits()
    images = torch.stack([test[i % len(test)][0] for i in range(batch)])
    return np.ascontiguousarray(images.numpy().astype(np.float32))


def time_calls(
    fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray, seconds: float
) -> list[float]:
    """Per-call latencies (s) of ``fn(x)`` for about ``seconds``."""
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - start)
    return times


def measure(forms: dict, seconds: float, rounds: int) -> dict[tuple[str, int], list[float]]:
    """Latencies of every (form, batch), the forms alternating within each round."""
    samples: dict[tuple[str, int], list[float]] = {(f, b): [] for f in forms for b in BATCHES}
    for batch in BATCHES:
        x = inputs(batch)
        for fn in forms.values():
            time_calls(fn, x, min(0.2, seconds))  # warm-up: allocations, first-run paths
        for r in range(rounds):
            order = list(forms)[r % len(forms) :] + list(forms)[: r % len(forms)]
            for name in order:
                samples[(name, batch)] += time_calls(forms[name], x, seconds / rounds)
    return samples


def parity(forms: dict) -> float:
    x = inputs(64)
    ref = forms[FORMS[0]](x)
    return max(float(np.abs(fn(x) - ref).max()) for fn in forms.values())


def report(samples: dict[tuple[str, int], list[float]]) -> dict[tuple[str, int], float]:
    """Print the table; returns the throughput of each (form, batch) in samples/s."""
    print(
        f"{'form':<15} {'batch':>5} {'median ms':>10} {'p90 ms':>9} {'samples/s':>11} {'calls':>7}"
    )
    speed = {}
    for (name, batch), times in samples.items():
        median = statistics.median(times)
        p90 = float(np.percentile(times, 90))
        speed[(name, batch)] = batch / median
        print(f"{name:<15} {batch:>5} {median * 1e3:>10.3f} {p90 * 1e3:>9.3f} "
              f"{batch / median:>11.0f} {len(times):>7}")  # fmt: skip
    return speed


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per cell")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quick", action="store_true", help="0.3 s per cell, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds = 0.3, 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="trainwell-inference-") as folder:
        forms = build_forms(Path(folder), args.threads)
        print(f"simple_cnn (10 classes, 1x8x8 input) on the CPU, {args.threads} intra-op "
              f"threads, torch {torch.__version__}, {args.seconds:g} s per cell over "
              f"{args.rounds} round(s)")  # fmt: skip
        print(f"outputs agree: max abs difference to eager {parity(forms):.2e}")
        speed = report(measure(forms, args.seconds, args.rounds))
    for batch in BATCHES:
        for other in FORMS[1:]:
            ratio = speed[(other, batch)] / speed[(FORMS[0], batch)]
            print(f"ratio ({other} / eager, batch {batch} samples/s): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
