"""Tests for trainwell.env: facts about this machine and advice on fabricated machines."""

from __future__ import annotations

import copy
import importlib.metadata
import io
import json
import os
import shutil
import subprocess

import pytest
import torch
from rich.console import Console

from trainwell import env

TOP_KEYS = {
    "python",
    "torch",
    "cpu",
    "devices",
    "driver",
    "environment",
    "packages",
    "trainwell",
    "advice",
}
PACKAGE_KEYS = {
    "numpy",
    "rich",
    "yaml",
    "omegaconf",
    "matplotlib",
    "sklearn",
    "safetensors",
    "onnx",
    "onnxruntime",
}
CPU_ONLY_TORCH = torch.version.cuda is None and getattr(torch.version, "hip", None) is None


def healthy_cuda_machine() -> dict:
    """A fabricated, well-configured machine with one A100."""
    return {
        "python": {"version": "3.11.7", "executable": "/usr/bin/python3", "platform": "Linux"},
        "torch": {
            "version": "2.6.0+cu126",
            "cpu_build": False,
            "cuda": "12.6",
            "cudnn": 90100,
            "hip": None,
            "debug": False,
            "cuda_available": True,
        },
        "cpu": {"logical_cores": 32, "usable_cores": 32, "capability": "AVX2", "bf16_fast": False},
        "devices": [
            {
                "type": "cuda",
                "index": 0,
                "name": "NVIDIA A100-SXM4-80GB",
                "capability": "8.0",
                "total_memory_bytes": 85_899_345_920,
                "bf16": True,
            }
        ],
        "driver": {
            "nvidia_smi": "/usr/bin/nvidia-smi",
            "driver_version": "560.35.03",
            "cuda_version": "12.6",
            "gpu_count": 1,
            "error": None,
        },
        "environment": {"CUDA_VISIBLE_DEVICES": None},
        "packages": {"numpy": "2.1.0"},
        "trainwell": "0.1.0",
    }


def cpu_machine(**torch_overrides) -> dict:
    """A fabricated laptop without a GPU and a CPU build of torch."""
    info = healthy_cuda_machine()
    info["torch"].update(
        version="2.6.0+cpu", cpu_build=True, cuda=None, cudnn=None, cuda_available=False
    )
    info["torch"].update(torch_overrides)
    info["devices"] = []
    info["driver"] = None
    info["cpu"].update(logical_cores=8, usable_cores=8)
    return info


def by_code(advice: list[dict]) -> dict[str, dict]:
    return {a["code"]: a for a in advice}


def serious(advice: list[dict]) -> list[dict]:
    return [a for a in advice if a["severity"] in ("error", "warning")]


# --- collect() on this machine ------------------------------------------------------


def test_collect_has_every_key_and_round_trips_through_json():
    info = env.collect()

    assert set(info) == TOP_KEYS
    assert set(info["python"]) >= {"version", "executable", "platform"}
    assert set(info["torch"]) >= {"version", "cpu_build", "cuda", "cudnn", "hip", "debug"}
    assert set(info["cpu"]) >= {"logical_cores", "usable_cores", "capability", "bf16_fast"}
    assert set(info["packages"]) == PACKAGE_KEYS
    assert info["torch"]["version"] == torch.__version__
    assert isinstance(info["trainwell"], str) and info["trainwell"]
    assert json.loads(json.dumps(info)) == info


def test_to_json_is_indented_unsorted_and_ends_with_newline():
    info = env.collect()
    text = env.to_json(info)

    assert text.endswith("}\n")
    assert json.loads(text) == info
    assert text.startswith('{\n  "python": {')  # insertion order, not sorted
    assert text.index('"python"') < text.index('"advice"')


@pytest.mark.skipif(not CPU_ONLY_TORCH, reason="needs the CPU build of torch")
def test_collect_reports_cpu_build_and_no_cuda_devices_here():
    info = env.collect()

    assert info["torch"]["cpu_build"] is True
    assert info["torch"]["cuda"] is None
    assert info["torch"]["cudnn"] is None
    assert info["torch"]["cuda_available"] is False
    assert [d for d in info["devices"] if d["type"] == "cuda"] == []


def test_collect_cpu_facts_match_the_os():
    cpu = env.collect()["cpu"]

    assert cpu["logical_cores"] == os.cpu_count()
    if hasattr(os, "sched_getaffinity"):
        assert cpu["usable_cores"] == len(os.sched_getaffinity(0))
    assert cpu["capability"] == torch.backends.cpu.get_cpu_capability()
    assert cpu["bf16_fast"] is env.cpu_has_fast_bf16()


def test_collect_package_versions_come_from_metadata():
    packages = env.collect()["packages"]

    assert packages["numpy"] == importlib.metadata.version("numpy")
    assert packages["yaml"] == importlib.metadata.version("PyYAML")
    for name, version in packages.items():
        assert version is None or isinstance(version, str), name


def test_missing_package_is_none(monkeypatch):
    real_version = importlib.metadata.version

    def version(dist):
        if dist.startswith("onnx"):
            raise importlib.metadata.PackageNotFoundError(dist)
        return real_version(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    packages = env.collect()["packages"]

    assert packages["onnx"] is None
    assert packages["onnxruntime"] is None
    assert packages["rich"] == real_version("rich")


# --- cpu_has_fast_bf16 --------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni", True),
        ("fpu sse2 avx2 amx_tile amx_bf16 amx_int8", True),
        ("fpu sse2 avx2 avx512f avx512bw avx512_vnni", False),
    ],
)
def test_cpu_has_fast_bf16_reads_cpuinfo_flags(tmp_path, flags, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\n")

    assert env.cpu_has_fast_bf16(cpuinfo) is expected


def test_cpu_has_fast_bf16_is_false_without_cpuinfo(tmp_path):
    assert env.cpu_has_fast_bf16(tmp_path / "missing") is False


# --- advise() on fabricated machines ------------------------------------------------


def test_healthy_cuda_machine_gets_no_error_or_warning():
    advice = env.advise(healthy_cuda_machine())

    assert serious(advice) == []
    assert "no-accelerator" not in by_code(advice)


def test_advice_items_have_the_documented_shape():
    info = cpu_machine(version="2.3.1+cpu")
    info["driver"] = {"driver_version": "550.54", "cuda_version": "12.4", "error": None}
    info["cpu"].update(logical_cores=64, usable_cores=4)
    advice = env.advise(info)

    assert len(advice) >= 4
    for item in advice:
        assert {"severity", "message", "fix"} <= set(item)
        assert item["severity"] in {"error", "warning", "info"}
        assert item["message"] and item["fix"]
        # one plain sentence: no sentence break inside the message
        assert ". " not in item["message"].rstrip(".")
    order = {"error": 0, "warning": 1, "info": 2}
    assert [order[a["severity"]] for a in advice] == sorted(order[a["severity"]] for a in advice)


def test_advise_does_not_modify_its_input_and_tolerates_an_empty_dict():
    info = cpu_machine()
    before = copy.deepcopy(info)
    env.advise(info)

    assert info == before
    assert isinstance(env.advise({}), list)


def test_cpu_build_with_nvidia_smi_is_an_error_naming_a_cuda_index():
    info = cpu_machine()
    info["driver"] = {
        "driver_version": "550.54.15",
        "cuda_version": "12.4",
        "gpu_count": 1,
        "error": None,
    }
    item = by_code(env.advise(info))["cpu-build-with-gpu"]

    assert item["severity"] == "error"
    assert "CPU-only" in item["message"]
    assert "pip install torch --index-url https://download.pytorch.org/whl/cu124" in item["fix"]


def test_cpu_build_with_newer_driver_suggests_a_wheel_it_can_run():
    info = cpu_machine()
    info["driver"] = {"driver_version": "575.51", "cuda_version": "12.9", "error": None}
    fix = by_code(env.advise(info))["cpu-build-with-gpu"]["fix"]

    assert "/whl/cu128" in fix


def test_cpu_build_without_nvidia_smi_is_not_an_error():
    advice = env.advise(cpu_machine())

    assert [a for a in advice if a["severity"] == "error"] == []


def test_driver_older_than_cuda_runtime_is_an_error():
    info = healthy_cuda_machine()
    info["driver"]["cuda_version"] = "12.2"
    item = by_code(env.advise(info))["driver-too-old"]

    assert item["severity"] == "error"
    assert "12.2" in item["message"] and "12.6" in item["message"]
    assert "driver" in item["fix"]


@pytest.mark.parametrize(
    ("runtime", "driver", "too_old"),
    [
        ("12.10", "12.9", True),  # a string compare would say "12.9" > "12.10"
        ("12.9", "12.10", False),
        ("12.6", "12.6", False),
        ("11.8", "12.0", False),
        ("13.0", "12.9", True),
    ],
)
def test_driver_version_is_compared_numerically(runtime, driver, too_old):
    info = healthy_cuda_machine()
    info["torch"]["cuda"] = runtime
    info["driver"]["cuda_version"] = driver

    assert ("driver-too-old" in by_code(env.advise(info))) is too_old


def test_no_accelerator_is_info_about_the_cpu():
    item = by_code(env.advise(cpu_machine()))["no-accelerator"]

    assert item["severity"] == "info"
    assert item["message"].startswith("training runs on the CPU; ")


def test_mps_counts_as_an_accelerator():
    info = cpu_machine()
    info["devices"] = [{"type": "mps", "index": 0, "name": "Apple MPS"}]

    assert "no-accelerator" not in by_code(env.advise(info))


def test_cuda_build_without_gpu_warns_and_names_cuda_visible_devices():
    info = healthy_cuda_machine()
    info["torch"]["cuda_available"] = False
    info["devices"] = []
    info["environment"] = {"CUDA_VISIBLE_DEVICES": ""}
    item = by_code(env.advise(info))["gpu-unavailable"]

    assert item["severity"] == "warning"
    assert "CUDA_VISIBLE_DEVICES is set to ''" in item["message"]
    assert "CUDA_VISIBLE_DEVICES" in item["fix"]


def test_cuda_build_without_driver_warns_about_the_missing_driver():
    info = healthy_cuda_machine()
    info["torch"]["cuda_available"] = False
    info["devices"] = []
    info["driver"] = None
    item = by_code(env.advise(info))["gpu-unavailable"]

    assert item["severity"] == "warning"
    assert "nvidia-smi" in item["message"]
    assert "CUDA_VISIBLE_DEVICES" not in item["message"]


def test_restricted_cpu_affinity_is_info():
    info = cpu_machine()
    info["cpu"].update(logical_cores=64, usable_cores=4)
    item = by_code(env.advise(info))["cpu-affinity"]

    assert item["severity"] == "info"
    assert "4 of the 64" in item["message"]
    assert "cpu-affinity" not in by_code(env.advise(cpu_machine()))


@pytest.mark.parametrize(
    ("version", "warned"),
    [("2.3.1+cu121", True), ("1.13.1", True), ("2.4.0", False), ("2.10.0+cpu", False)],
)
def test_old_torch_warns(version, warned):
    info = healthy_cuda_machine()
    info["torch"]["version"] = version
    item = by_code(env.advise(info)).get("torch-too-old")

    assert (item is not None) is warned
    if warned:
        assert item["severity"] == "warning"
        assert "2.4" in item["message"]


# --- nvidia-smi: present, missing, failing -------------------------------------------


def test_missing_nvidia_smi_gives_no_driver(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)

    def no_run(*args, **kwargs):
        raise AssertionError("nvidia-smi must not be run when it is not on PATH")

    monkeypatch.setattr(subprocess, "run", no_run)
    info = env.collect()

    assert info["driver"] is None


@pytest.mark.slow
def test_nvidia_smi_output_is_parsed(monkeypatch):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append((cmd, kwargs))
        if len(cmd) > 1:
            out = "550.54.15\n550.54.15\n"
        else:
            out = (
                "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |\n"
            )
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(subprocess, "run", fake_run)
    driver = env.collect()["driver"]

    assert driver["driver_version"] == "550.54.15"
    assert driver["cuda_version"] == "12.4"
    assert driver["gpu_count"] == 2
    assert driver["error"] is None
    assert ["/usr/bin/nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"] in [
        c for c, _ in calls
    ]
    assert all(kw.get("timeout") == 10 for _, kw in calls)


@pytest.mark.parametrize(
    "failure",
    [
        FileNotFoundError(2, "No such file or directory"),
        PermissionError(13, "Permission denied"),
        subprocess.TimeoutExpired("nvidia-smi", 10),
        subprocess.CompletedProcess(
            ["nvidia-smi"],
            9,
            stdout="NVIDIA-SMI has failed because it couldn't communicate with the "
            "NVIDIA driver.\nMake sure that the latest NVIDIA driver is installed.\n",
            stderr="",
        ),
    ],
    ids=["not-found", "permission", "timeout", "exit-code"],
)
def test_failing_nvidia_smi_never_crashes(monkeypatch, failure):
    def fake_run(cmd, **kwargs):
        if isinstance(failure, BaseException):
            raise failure
        return failure

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(subprocess, "run", fake_run)
    info = env.collect()
    driver = info["driver"]

    assert isinstance(driver["error"], str) and driver["error"]
    assert "\n" not in driver["error"]
    assert driver["driver_version"] is None and driver["cuda_version"] is None
    assert by_code(info["advice"])["nvidia-smi-failed"]["severity"] == "warning"
    json.loads(env.to_json(info))


# --- render() ------------------------------------------------------------------------


def test_render_mentions_torch_version_and_advice():
    out = io.StringIO()
    env.render(env.collect(), console=Console(file=out, width=120))
    text = out.getvalue()

    assert torch.__version__ in text
    assert "python" in text


def test_render_keeps_brackets_and_computes_missing_advice():
    info = cpu_machine(version="2.3.1[weird]")
    out = io.StringIO()
    env.render(info, console=Console(file=out, width=120))  # advice computed on the fly
    text = out.getvalue()

    assert "2.3.1[weird]" in text
    assert "warning:" in text and "info:" in text
    assert "training runs on the CPU" in text


def test_render_says_when_nothing_is_wrong():
    info = healthy_cuda_machine()
    info["advice"] = env.advise(info)
    out = io.StringIO()
    env.render(info, console=Console(file=out, width=120))
    text = out.getvalue()

    assert "NVIDIA A100-SXM4-80GB" in text
    assert "no problems found" in text
