"""Facts about this machine as PyTorch sees it: the torch build, CPU, devices, the NVIDIA
driver and package versions; each helper records a problem instead of raising."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
from typing import Any

import torch

# Distribution names differ from import names (yaml, sklearn) and some packages ship
# under alternative distributions (onnxruntime-gpu), so each key lists the candidates.
_PACKAGES: dict[str, tuple[str, ...]] = {
    "numpy": ("numpy",),
    "rich": ("rich",),
    "yaml": ("PyYAML",),
    "omegaconf": ("omegaconf",),
    "matplotlib": ("matplotlib",),
    "sklearn": ("scikit-learn",),
    "safetensors": ("safetensors",),
    "onnx": ("onnx",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml"),
}


# Environment variables that silently change which devices or how many threads torch
# uses; recording them explains reports that would otherwise look contradictory.
ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
)


_NVIDIA_SMI_TIMEOUT_S = 10


def cpu_has_fast_bf16(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> bool:
    """Whether the CPU computes bfloat16 natively (AVX512-BF16 or AMX-BF16).

    Without these instructions bf16 on the CPU is emulated and usually slower than
    fp32, so the engine uses this to choose ``train.precision=auto`` on the CPU.
    Returns False where ``/proc/cpuinfo`` does not exist (macOS, Windows).

    Example:
        >>> from trainwell.env import cpu_has_fast_bf16
        >>> precision = "bf16" if cpu_has_fast_bf16() else "fp32"
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                # Every core repeats the same flags; the first line is enough and
                # avoids reading megabytes on many-core machines.
                if line.startswith("flags"):
                    flags = set(line.partition(":")[2].split())
                    return bool(flags & {"amx_bf16", "avx512_bf16"})
    except OSError:
        return False
    return False


def torch_info() -> dict[str, Any]:
    cuda = torch.version.cuda
    hip = getattr(torch.version, "hip", None)
    cudnn = None
    try:
        # A CPU build reports cuDNN unavailable without loading anything.
        if cuda and torch.backends.cudnn.is_available():
            cudnn = torch.backends.cudnn.version()
    except Exception:  # a broken cuDNN install must not stop the report
        cudnn = None
    try:
        cuda_available = bool(torch.cuda.is_available())
    except Exception:
        cuda_available = False
    return {
        "version": torch.__version__,
        "cpu_build": "+cpu" in torch.__version__ or (cuda is None and hip is None),
        "cuda": cuda,
        "cudnn": cudnn,
        "hip": hip,
        "debug": bool(getattr(torch.version, "debug", False)),
        "cuda_available": cuda_available,
    }


def usable_cores() -> int | None:
    """The cores this process may run on (``None`` where the system cannot tell)."""
    # sched_getaffinity is Linux-only; elsewhere the usable count is unknown.
    if hasattr(os, "sched_getaffinity"):
        try:
            return len(os.sched_getaffinity(0))
        except OSError:
            return None
    return None


def cpu_info() -> dict[str, Any]:
    usable = usable_cores()
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except Exception:
        capability = None
    return {
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "capability": capability,
        "torch_threads": torch.get_num_threads(),
        "bf16_fast": cpu_has_fast_bf16(),
    }


def devices() -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = []
    try:
        cuda_ok = torch.cuda.is_available()
    except Exception:
        cuda_ok = False
    # Everything below initialises CUDA, so it runs only when CUDA is really there.
    if cuda_ok:
        for index in range(torch.cuda.device_count()):
            try:
                props = torch.cuda.get_device_properties(index)
                devices.append(
                    {
                        "type": "cuda",
                        "index": index,
                        "name": props.name,
                        "capability": f"{props.major}.{props.minor}",
                        "total_memory_bytes": int(props.total_memory),
                        "bf16": _cuda_bf16(index, props.major),
                    }
                )
            except Exception as exc:  # one bad device should not hide the others
                devices.append({"type": "cuda", "index": index, "error": one_line(exc)})
    try:
        mps_ok = torch.backends.mps.is_available()
    except Exception:
        mps_ok = False
    if mps_ok:
        memory = None
        try:
            memory = int(torch.mps.recommended_max_memory())
        except Exception:
            memory = None
        devices.append(
            {
                "type": "mps",
                "index": 0,
                "name": "Apple MPS",
                "capability": None,
                "total_memory_bytes": memory,
                "bf16": None,
            }
        )
    return devices


def _cuda_bf16(index: int, major: int) -> bool:
    # Without including_emulation=False torch answers True for pre-Ampere GPUs by
    # running a test kernel; emulated bf16 is slow, so it is not what we report.
    try:
        with torch.cuda.device(index):
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:
        return bool(torch.version.hip) or major >= 8
    except Exception:
        return False


def driver_info() -> dict[str, Any] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    driver: dict[str, Any] = {
        "nvidia_smi": exe,
        "driver_version": None,
        "cuda_version": None,
        "gpu_count": None,
        "error": None,
    }
    errors = []
    out, err = _run([exe, "--query-gpu=driver_version", "--format=csv,noheader"])
    if err:
        errors.append(err)
    else:
        versions = [line.strip() for line in out.splitlines() if line.strip()]
        driver["gpu_count"] = len(versions)
        driver["driver_version"] = versions[0] if versions else None
    out, err = _run([exe])
    if err:
        errors.append(err)
    else:
        match = re.search(r"CUDA Version:\s*(\d+\.\d+)", out)
        driver["cuda_version"] = match.group(1) if match else None
    if errors:
        # Both calls usually fail for the same reason; say it once.
        driver["error"] = "; ".join(dict.fromkeys(errors))
    return driver


def _run(cmd: list[str]) -> tuple[str, str | None]:
    """Run ``cmd``; return (stdout, None) on success or ("", reason) on any failure."""
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return "", f"{os.path.basename(cmd[0])} timed out after {_NVIDIA_SMI_TIMEOUT_S} s"
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return "", f"{os.path.basename(cmd[0])} could not run: {one_line(exc)}"
    if proc.returncode != 0:
        detail = one_line(proc.stderr or proc.stdout or "")
        reason = f"{os.path.basename(cmd[0])} exited with code {proc.returncode}"
        return "", f"{reason}: {detail}" if detail else reason
    return proc.stdout or "", None


def package_versions() -> dict[str, str | None]:
    return {key: distribution_version(dists) for key, dists in _PACKAGES.items()}


def distribution_version(dists: tuple[str, ...]) -> str | None:
    # Metadata only: importing matplotlib or onnxruntime would cost seconds.
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def one_line(value: Any) -> str:
    lines = [line.strip() for line in str(value).splitlines() if line.strip()]
    return lines[0] if lines else ""
