"""Advice from a machine's description: a pure function of the dict, so that any machine
can be described by a fabricated one in tests."""

from __future__ import annotations

import re
from typing import Any

# CUDA wheel indexes PyTorch has published; the advice picks the newest one the
# driver can run, so the suggested command works on the first try.
CUDA_WHEELS = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (13, 0))
# The wheel suggested when the driver's CUDA version is not known.
DEFAULT_CUDA_WHEEL = (12, 6)


_MIN_TORCH = (2, 4)


SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def advise(info: dict[str, Any]) -> list[dict[str, str]]:
    """Turn a description from :func:`collect` into advice, most severe first.

    Each item is ``{"code", "severity", "message", "fix"}`` with severity ``error``
    (training on the intended hardware will not work), ``warning`` (it works badly or
    surprisingly) or ``info``. Pure: it reads only ``info``, so a fabricated dict
    describes any machine. Missing keys are treated as unknown, not as problems.

    Example:
        >>> from trainwell.env import advise
        >>> info = {"torch": {"version": "2.6.0+cpu", "cpu_build": True, "cuda": None},
        ...         "driver": {"driver_version": "550.54", "cuda_version": "12.4"},
        ...         "devices": []}
        >>> [a["severity"] for a in advise(info)]
        ['error', 'info']
    """
    tinfo = info.get("torch") or {}
    cpu = info.get("cpu") or {}
    devices = info.get("devices") or []
    driver = info.get("driver")
    environ = info.get("environment") or {}
    advice: list[dict[str, str]] = []

    def add(code: str, severity: str, message: str, fix: str) -> None:
        advice.append({"code": code, "severity": severity, "message": message, "fix": fix})

    driver_cuda = major_minor(driver.get("cuda_version")) if driver else None
    if tinfo.get("cpu_build") and (driver is not None or _has_cuda_device(devices)):
        wheel = _cuda_wheel_for(driver_cuda)
        add(
            "cpu-build-with-gpu",
            "error",
            f"torch {tinfo.get('version', '?')} is a CPU-only build, but this machine has "
            "an NVIDIA GPU (nvidia-smi is installed), so training will not use the GPU.",
            f"pip install torch --index-url https://download.pytorch.org/whl/{wheel} "
            "(any cuXYZ at or below the driver's CUDA version works; see "
            "https://pytorch.org/get-started/locally/)",
        )

    if driver is not None and driver.get("error"):
        add(
            "nvidia-smi-failed",
            "warning",
            f"nvidia-smi is installed but failed ({driver['error']}), so the NVIDIA "
            "driver is probably not loaded or does not match the kernel.",
            "run nvidia-smi yourself; reinstalling the driver or rebooting after a "
            "driver or kernel update usually fixes it",
        )

    runtime_cuda = major_minor(tinfo.get("cuda"))
    if runtime_cuda and driver_cuda and driver_cuda < runtime_cuda:
        add(
            "driver-too-old",
            "error",
            f"the NVIDIA driver supports CUDA up to {fmt_version(driver_cuda)}, older than the "
            f"CUDA {fmt_version(runtime_cuda)} this torch was built with, so CUDA may fail to "
            "start or kernels may fail to load.",
            "update the NVIDIA driver, or install a torch built for the driver's CUDA: "
            "pip install torch --index-url "
            f"https://download.pytorch.org/whl/{_cuda_wheel_for(driver_cuda)}",
        )

    gpu_build = bool(tinfo.get("cuda") or tinfo.get("hip"))
    if gpu_build and tinfo.get("cuda_available") is False:
        add("gpu-unavailable", "warning", *_gpu_unavailable_reason(tinfo, driver, environ))

    for item in _failed_checks(info.get("checks") or []):
        add(*item)

    if not devices:
        add(
            "no-accelerator",
            "info",
            "training runs on the CPU; small models such as the built-in digits CNN "
            "train in seconds to minutes, but expect large models to be 10 to 100 "
            "times slower than on a GPU.",
            "keep models and batches small on this machine, or train on a machine with a GPU",
        )

    logical, usable = cpu.get("logical_cores"), cpu.get("usable_cores")
    if isinstance(logical, int) and isinstance(usable, int) and usable < logical:
        workers = max(usable - 1, 0)
        add(
            "cpu-affinity",
            "info",
            f"this process may use only {usable} of the {logical} CPU cores (CPU "
            "affinity set by taskset, a container or a job scheduler).",
            f"size the work to {usable} cores: data.num_workers={workers} or fewer, "
            "or ask the scheduler for more cores",
        )

    version = major_minor(tinfo.get("version"))
    if version and version < _MIN_TORCH:
        add(
            "torch-too-old",
            "warning",
            f"torch {tinfo.get('version')} is older than {fmt_version(_MIN_TORCH)}, the oldest "
            "version trainwell supports.",
            f"pip install --upgrade 'torch>={fmt_version(_MIN_TORCH)}' (with --index-url for "
            "your CUDA build)",
        )

    advice.sort(key=lambda a: SEVERITY_ORDER.get(a["severity"], len(SEVERITY_ORDER)))
    return advice


def major_minor(version: Any) -> tuple[int, int] | None:
    """``"12.10"`` -> (12, 10); compared as numbers, so 12.10 is newer than 12.9."""
    if not isinstance(version, str):
        return None
    match = re.match(r"\s*(\d+)(?:\.(\d+))?", version)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2) or 0)


def fmt_version(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _cuda_wheel_for(driver_cuda: tuple[int, int] | None) -> str:
    # Without a known driver version, or a driver older than every wheel, name the
    # common default; the advice text tells the user how to choose another.
    candidates = [w for w in CUDA_WHEELS if driver_cuda is not None and w <= driver_cuda]
    wheel = max(candidates) if candidates else DEFAULT_CUDA_WHEEL
    return f"cu{wheel[0]}{wheel[1]}"


def _has_cuda_device(devices: list[dict[str, Any]]) -> bool:
    return any(d.get("type", "cuda") == "cuda" for d in devices)


def _gpu_unavailable_reason(
    tinfo: dict[str, Any], driver: dict[str, Any] | None, environ: dict[str, Any]
) -> tuple[str, str]:
    build = f"ROCm {tinfo['hip']}" if tinfo.get("hip") else f"CUDA {tinfo.get('cuda')}"
    base = f"torch is built for {build} but torch.cuda.is_available() is False"
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        value = environ.get(var)
        if value is not None:
            return (
                f"{base}, and {var} is set to {value!r}, which may hide every GPU.",
                f"unset {var} or set it to the GPUs to use, e.g. {var}=0",
            )
    if tinfo.get("hip"):
        return (
            f"{base}, so the ROCm driver is missing or this user cannot reach the GPU.",
            "check that rocm-smi lists the GPU and that this user is in the render and "
            "video groups",
        )
    if driver is None:
        return (
            f"{base}, and nvidia-smi is not on PATH, so no NVIDIA driver seems installed.",
            "install the NVIDIA driver, or if this machine has no GPU install the CPU "
            "build: pip install torch --index-url https://download.pytorch.org/whl/cpu",
        )
    return (
        f"{base} although nvidia-smi is installed, so the driver, the GPU or the "
        "container's GPU access is not working.",
        "run nvidia-smi; in a container, start it with GPU access (docker run --gpus all)",
    )


def _failed_checks(checks: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """A device that could not run a matmul (``trainwell env``'s checks) is an error: a
    run there would fail at its first kernel, or compute wrong numbers."""
    found = []
    for check in checks:
        if check.get("ok"):
            continue
        device = str(check.get("device", "?"))
        if device.startswith("mps"):
            fix = ("update macOS and torch; meanwhile PYTORCH_ENABLE_MPS_FALLBACK=1 runs "
                   "missing ops on the CPU, or train on run.device=cpu")  # fmt: skip
        elif device == "cpu":
            fix = "reinstall torch (pip install --force-reinstall torch): the build is broken"
        else:
            fix = ("compare the driver's CUDA with the wheel's (the lines above); install the "
                   "torch wheel for this GPU and driver, or train on run.device=cpu")  # fmt: skip
        found.append((
            "device-check-failed", "error",
            f"{device} failed a small tensor operation: {check.get('error') or 'unknown'}",
            fix,
        ))  # fmt: skip
    return found
