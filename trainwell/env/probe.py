"""Prove each device computes: a small tensor operation checked against the CPU, and a
matmul timing, on the CPU and every GPU ``trainwell env`` lists.

A GPU can be listed by the driver and still fail its first kernel: a driver older than the
CUDA the wheel was built for, a card the build has no kernels for ("no kernel image is
available"), an MPS op without a Metal kernel. ``torch.cuda.is_available()`` says none of
that; running something does.
"""

from __future__ import annotations

import time
from typing import Any

import torch

# Matmul side per device type: big enough that the timing is the device's, small enough
# that the whole check is well under a second.
_SIDE = {"cpu": 256, "cuda": 2048, "mps": 1024}


def check_device(name: str, repeats: int = 3) -> dict[str, Any]:
    """Run a tensor op on device ``name`` (``cpu``, ``cuda:0``, ``mps``) and time a matmul.

    Returns ``{"device", "ok", "error", "matmul": {"side", "dtype", "ms", "gflops"}}``;
    never raises (a failure is the result).

    Example:
        >>> result = check_device("cpu")
        >>> result["ok"], result["error"], result["matmul"]["side"]
        (True, None, 256)
    """
    result: dict[str, Any] = {"device": name, "ok": False, "error": None, "matmul": None}
    try:
        device = torch.device(name)
        small = torch.randn(32, 32, generator=torch.Generator().manual_seed(0))
        got = (small.to(device) @ small.to(device)).cpu()
        if not torch.allclose(got, small @ small, rtol=1e-3, atol=1e-3):
            result["error"] = "a 32x32 matmul gave a different result than on the CPU"
            return result
        result["matmul"] = _time_matmul(device, repeats)
        result["ok"] = True
    except Exception as exc:  # the failure is the finding
        result["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    return result


def _time_matmul(device: torch.device, repeats: int) -> dict[str, Any]:
    side = _SIDE.get(device.type, 1024)
    a = torch.randn(side, side, device=device)
    b = torch.randn(side, side, device=device)
    _sync(device)
    (a @ b).sum().item()  # warm-up: kernels load, clocks rise
    began = time.perf_counter()
    for _ in range(repeats):
        c = a @ b
    _sync(device)
    float(c[0, 0])
    seconds = (time.perf_counter() - began) / repeats
    return {"side": side, "dtype": "float32", "ms": round(seconds * 1e3, 3),
            "gflops": round(2 * side**3 / max(seconds, 1e-12) / 1e9, 1)}  # fmt: skip


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def check_all(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`check_device` on the CPU and on each listed device that could be opened.

    Example:
        >>> [c["device"] for c in check_all([])]
        ['cpu']
    """
    names = ["cpu"]
    for d in devices:
        if d.get("error"):
            continue  # listing it failed already; that is its finding
        kind = d.get("type", "cuda")
        names.append("mps" if kind == "mps" else f"{kind}:{d.get('index', 0)}")
    return [check_device(n) for n in names]


def check_line(check: dict[str, Any]) -> str:
    """The readable fact for one check.

    Example:
        >>> check_line({"device": "cpu", "ok": True, "error": None,
        ...             "matmul": {"side": 256, "dtype": "float32", "ms": 1.5, "gflops": 22.4}})
        'ok; matmul 256x256 float32 in 1.50 ms (22.4 GFLOP/s)'
    """
    if not check.get("ok"):
        return f"FAILED: {check.get('error') or 'unknown error'}"
    m = check.get("matmul") or {}
    return (f"ok; matmul {m.get('side')}x{m.get('side')} {m.get('dtype')} in "
            f"{m.get('ms', 0):.2f} ms ({m.get('gflops')} GFLOP/s)")  # fmt: skip
