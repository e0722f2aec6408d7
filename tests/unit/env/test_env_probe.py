"""``trainwell env`` proves each device computes (issue 26 §5): a tensor op checked against
the CPU and a matmul timing per device; a device that fails is an error with a fix."""

from __future__ import annotations

import io
import json

from rich.console import Console

from trainwell.env import advise, render
from trainwell.env.probe import check_all, check_device, check_line


def test_the_cpu_computes_and_its_matmul_is_timed():
    result = check_device("cpu", repeats=2)
    assert result["ok"] and result["error"] is None
    m = result["matmul"]
    assert m["side"] == 256 and m["ms"] > 0 and m["gflops"] > 0
    assert check_line(result).startswith("ok; matmul 256x256 float32 in ")


def test_a_device_that_cannot_compute_is_a_failed_check_not_a_crash():
    for name in ("meta", "cuda:7", "nonsense:0"):
        result = check_device(name)
        assert not result["ok"] and result["matmul"] is None
        assert result["error"] and "\n" not in result["error"], result
        assert check_line(result).startswith("FAILED: ")


def test_devices_whose_listing_failed_are_not_checked_again():
    names = [c["device"] for c in check_all([{"type": "cuda", "index": 0, "error": "boom"}])]
    assert names == ["cpu"]


def test_a_failed_check_is_an_error_with_a_fix_for_its_kind():
    checks = [
        {"device": "cpu", "ok": True, "error": None, "matmul": None},
        {"device": "cuda:0", "ok": False, "error": "RuntimeError: no kernel image is available"},
        {"device": "mps", "ok": False, "error": "NotImplementedError: aten::foo"},
    ]
    advice = [a for a in advise({"checks": checks}) if a["code"] == "device-check-failed"]
    assert [a["severity"] for a in advice] == ["error", "error"]
    assert "cuda:0 failed a small tensor operation: RuntimeError: no kernel image" in (
        advice[0]["message"]
    )
    assert "wheel" in advice[0]["fix"] and "PYTORCH_ENABLE_MPS_FALLBACK" in advice[1]["fix"]
    out = io.StringIO()
    render({"checks": checks}, Console(file=out, width=200))
    text = out.getvalue()
    assert "check cuda:0" in text and "FAILED: RuntimeError: no kernel image" in text


def test_trainwell_env_runs_the_checks(cli):
    code, out, _ = cli("env", "--json")
    assert code == 0
    (cpu,) = [c for c in json.loads(out)["checks"] if c["device"] == "cpu"]
    assert cpu["ok"] and cpu["matmul"]["gflops"] > 0
    code, out, _ = cli("env")
    assert code == 0 and "check cpu" in out
