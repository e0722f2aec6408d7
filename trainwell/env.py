"""What this machine offers PyTorch, and what is wrong with it.

This module backs ``trainwell env`` and the ``env.json`` file of every run directory.
:func:`collect` gathers plain facts (Python, the torch build, CPU, devices, the NVIDIA
driver, package versions) into a JSON-serializable dict; :func:`advise` turns such a
dict into advice, and is a pure function so that any machine can be described by a
fabricated dict in tests; :func:`render` and :func:`to_json` present the result.

Nothing here initialises CUDA on a machine without it: device properties are read only
after ``torch.cuda.is_available()`` says yes, and that call itself creates no context.

Example:
    >>> from trainwell import env
    >>> info = env.collect()
    >>> sorted(info)[:3]
    ['advice', 'cpu', 'devices']
    >>> print(env.to_json(info))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from typing import Any

import torch
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["advise", "collect", "cpu_has_fast_bf16", "render", "to_json"]

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
_ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
)

# CUDA wheel indexes PyTorch has published; the advice picks the newest one the
# driver can run, so the suggested command works on the first try.
_CUDA_WHEELS = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (13, 0))
_DEFAULT_CUDA_WHEEL = (12, 6)

_MIN_TORCH = (2, 4)
_NVIDIA_SMI_TIMEOUT_S = 10
_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


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


def collect() -> dict[str, Any]:
    """Describe this machine as PyTorch sees it, with advice on what is wrong.

    The result is JSON-serializable and holds the keys ``python``, ``torch``, ``cpu``,
    ``devices``, ``driver`` (None without ``nvidia-smi``), ``environment``,
    ``packages``, ``trainwell`` and ``advice`` (from :func:`advise`). It never raises
    because of a broken driver or a missing package; such problems are recorded.

    Example:
        >>> from trainwell.env import collect
        >>> info = collect()
        >>> info["torch"]["version"]  # doctest: +SKIP
        '2.6.0+cu126'
        >>> [d["name"] for d in info["devices"]]  # doctest: +SKIP
        ['NVIDIA A100-SXM4-80GB']
    """
    info: dict[str, Any] = {
        "python": {
            "version": platform.python_version(),
            "executable": sys.executable,
            "platform": platform.platform(),
        },
        "torch": _torch_info(),
        "cpu": _cpu_info(),
        "devices": _devices(),
        "driver": _driver_info(),
        "environment": {name: os.environ.get(name) for name in _ENV_VARS},
        "packages": _package_versions(),
        "trainwell": _distribution_version(("trainwell",)) or "unknown",
    }
    info["advice"] = advise(info)
    return info


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

    driver_cuda = _major_minor(driver.get("cuda_version")) if driver else None
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

    runtime_cuda = _major_minor(tinfo.get("cuda"))
    if runtime_cuda and driver_cuda and driver_cuda < runtime_cuda:
        add(
            "driver-too-old",
            "error",
            f"the NVIDIA driver supports CUDA up to {_fmt(driver_cuda)}, older than the "
            f"CUDA {_fmt(runtime_cuda)} this torch was built with, so CUDA may fail to "
            "start or kernels may fail to load.",
            "update the NVIDIA driver, or install a torch built for the driver's CUDA: "
            "pip install torch --index-url "
            f"https://download.pytorch.org/whl/{_cuda_wheel_for(driver_cuda)}",
        )

    gpu_build = bool(tinfo.get("cuda") or tinfo.get("hip"))
    if gpu_build and tinfo.get("cuda_available") is False:
        add("gpu-unavailable", "warning", *_gpu_unavailable_reason(tinfo, driver, environ))

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

    version = _major_minor(tinfo.get("version"))
    if version and version < _MIN_TORCH:
        add(
            "torch-too-old",
            "warning",
            f"torch {tinfo.get('version')} is older than {_fmt(_MIN_TORCH)}, the oldest "
            "version trainwell supports.",
            f"pip install --upgrade 'torch>={_fmt(_MIN_TORCH)}' (with --index-url for "
            "your CUDA build)",
        )

    advice.sort(key=lambda a: _SEVERITY_ORDER.get(a["severity"], len(_SEVERITY_ORDER)))
    return advice


def render(info: dict[str, Any], console: Console | None = None) -> None:
    """Print a readable report of ``info``: a table of facts, then the advice.

    Example:
        >>> import io
        >>> from rich.console import Console
        >>> from trainwell.env import collect, render
        >>> out = io.StringIO()
        >>> render(collect(), Console(file=out, width=120))
        >>> "torch" in out.getvalue()
        True
    """
    # Wrapped to the terminal only; in logs and pipes every line stays whole.
    console = console or Console(soft_wrap=not sys.stdout.isatty())
    table = Table(title="trainwell env", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    for label, value in _facts(info):
        # Text, not markup: versions and paths may contain "[" that rich would eat.
        table.add_row(label, Text(value))
    console.print(table)

    advice = info.get("advice")
    if advice is None:
        advice = advise(info)
    if not advice:
        console.print(Text("no problems found", style="green"))
        return
    for item in advice:
        severity = item.get("severity", "info")
        line = Text()
        line.append(f"{severity}: ", style=_SEVERITY_STYLE.get(severity, ""))
        line.append(item.get("message", ""))
        console.print(line)
        if item.get("fix"):
            console.print(Text(f"  fix: {item['fix']}", style="dim"))


def to_json(info: dict[str, Any]) -> str:
    """Serialize ``info`` as the text of ``env.json``: indented, keys in order.

    Example:
        >>> from trainwell.env import to_json
        >>> to_json({"trainwell": "0.1.0"})
        '{\\n  "trainwell": "0.1.0"\\n}\\n'
    """
    return json.dumps(info, indent=2, sort_keys=False) + "\n"


# --- collection helpers -------------------------------------------------------------


def _torch_info() -> dict[str, Any]:
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


def _cpu_info() -> dict[str, Any]:
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


def _devices() -> list[dict[str, Any]]:
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
                devices.append({"type": "cuda", "index": index, "error": _one_line(exc)})
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


def _driver_info() -> dict[str, Any] | None:
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
        return "", f"{os.path.basename(cmd[0])} could not run: {_one_line(exc)}"
    if proc.returncode != 0:
        detail = _one_line(proc.stderr or proc.stdout or "")
        reason = f"{os.path.basename(cmd[0])} exited with code {proc.returncode}"
        return "", f"{reason}: {detail}" if detail else reason
    return proc.stdout or "", None


def _package_versions() -> dict[str, str | None]:
    return {key: _distribution_version(dists) for key, dists in _PACKAGES.items()}


def _distribution_version(dists: tuple[str, ...]) -> str | None:
    # Metadata only: importing matplotlib or onnxruntime would cost seconds.
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


# --- advice helpers -----------------------------------------------------------------


def _major_minor(version: Any) -> tuple[int, int] | None:
    """``"12.10"`` -> (12, 10); compared as numbers, so 12.10 is newer than 12.9."""
    if not isinstance(version, str):
        return None
    match = re.match(r"\s*(\d+)(?:\.(\d+))?", version)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2) or 0)


def _fmt(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _cuda_wheel_for(driver_cuda: tuple[int, int] | None) -> str:
    # Without a known driver version, or a driver older than every wheel, name the
    # common default; the advice text tells the user how to choose another.
    candidates = [w for w in _CUDA_WHEELS if driver_cuda is not None and w <= driver_cuda]
    wheel = max(candidates) if candidates else _DEFAULT_CUDA_WHEEL
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


def _facts(info: dict[str, Any]) -> list[tuple[str, str]]:
    py = info.get("python") or {}
    t = info.get("torch") or {}
    facts = [
        ("python", f"{py.get('version', '?')} ({py.get('executable', '?')})"),
        ("platform", str(py.get("platform", "?"))),
        ("torch", str(t.get("version", "?")) + (" (debug build)" if t.get("debug") else "")),
        ("torch build", _build_line(t)),
        ("cpu", _cpu_line(info.get("cpu") or {})),
    ]
    devices = info.get("devices") or []
    if not devices:
        facts.append(("devices", "none (CPU only)"))
    facts += [_device_fact(d) for d in devices]
    facts.append(("nvidia driver", _driver_line(info.get("driver"))))
    environ = {k: v for k, v in (info.get("environment") or {}).items() if v is not None}
    if environ:
        facts.append(("environment", " ".join(f"{k}={v}" for k, v in environ.items())))
    packages = info.get("packages") or {}
    if packages:
        facts.append(("packages", ", ".join(f"{k} {v or 'missing'}" for k, v in packages.items())))
    facts.append(("trainwell", str(info.get("trainwell", "unknown"))))
    return facts


def _build_line(t: dict[str, Any]) -> str:
    if t.get("hip"):
        build = f"ROCm {t['hip']}"
    elif t.get("cuda"):
        build = f"CUDA {t['cuda']}" + (f", cuDNN {t['cudnn']}" if t.get("cudnn") else "")
    else:
        build = "CPU only"
    if "cuda_available" in t and (t.get("cuda") or t.get("hip")):
        build += ", GPU available" if t["cuda_available"] else ", GPU not available"
    return build


def _cpu_line(cpu: dict[str, Any]) -> str:
    cores = str(cpu.get("logical_cores", "?"))
    if cpu.get("usable_cores") is not None and cpu.get("usable_cores") != cpu.get("logical_cores"):
        cores = f"{cpu['usable_cores']} usable of {cores}"
    line = f"{cores} cores, {cpu.get('capability') or 'unknown'} kernels"
    line += ", fast bf16" if cpu.get("bf16_fast") else ", no fast bf16"
    if cpu.get("torch_threads") is not None:
        line += f", torch uses {cpu['torch_threads']} threads"
    return line


def _device_fact(d: dict[str, Any]) -> tuple[str, str]:
    label = f"{d.get('type', 'cuda')}:{d.get('index', '?')}"
    if d.get("error"):
        return label, f"error: {d['error']}"
    parts = [str(d.get("name", "?"))]
    if d.get("capability"):
        parts.append(f"capability {d['capability']}")
    if d.get("total_memory_bytes"):
        parts.append(f"{d['total_memory_bytes'] / 2**30:.1f} GiB")
    if d.get("bf16") is not None:
        parts.append("bf16" if d["bf16"] else "no bf16")
    return label, ", ".join(parts)


def _driver_line(driver: dict[str, Any] | None) -> str:
    if driver is None:
        return "nvidia-smi not found"
    text = f"{driver.get('driver_version') or '?'} (CUDA {driver.get('cuda_version') or '?'})"
    if driver.get("error"):
        text += f", error: {driver['error']}"
    return text


def _one_line(value: Any) -> str:
    lines = [line.strip() for line in str(value).splitlines() if line.strip()]
    return lines[0] if lines else ""
