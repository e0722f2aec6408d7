"""``trainwell profile`` hides the profiler's C++ noise lines (Kineto's USDT trace points,
the CPU allocator's note) and keeps every other line written to fd 2 (issue 26 §6)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import SYNTHETIC, run_subprocess
from trainwell.engine.tools.native_noise import NoiseFilter, drop_noise

USDT = "USDT:2026-12-02 01:35:25 25546:25546 SyncActivityProfilerHandler.cpp:52] profiler_start"
ALLOC = ("[W1202 01:35:25.373935458 CPUAllocator.cpp:245] Memory block of unknown size was "
         "allocated before the profiling started, profiler results will not include the "
         "deallocation event")  # fmt: skip


def test_the_filter_drops_the_noise_and_keeps_the_rest(capfd):
    noise = NoiseFilter()
    noise.open()
    os.write(2, f"{USDT}\nan error of the user's\n{ALLOC}\n".encode())
    noise.close()
    noise.close()  # twice is fine
    assert capfd.readouterr().err == "an error of the user's\n"


def test_drop_noise_leaves_lines_that_only_look_alike():
    text = "USDT is a word\n[W1202 x.cpp:1] another warning\n"
    assert drop_noise(text) == text


@pytest.mark.slow
def test_trainwell_profile_prints_no_profiler_noise(tmp_path):
    proc = run_subprocess(["profile", *SYNTHETIC, "--steps", "2", "--warmup", "1",
                           "--out", "prof"], tmp_path, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "USDT" not in proc.stderr and "CPUAllocator" not in proc.stderr, proc.stderr
    assert "five heaviest operators" in proc.stdout
