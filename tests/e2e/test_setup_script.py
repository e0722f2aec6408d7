"""``scripts/setup.sh``'s choice of CUDA wheel (issue 26 §5): the newest one the driver that
``nvidia-smi`` reports can run, picked without importing torch (not installed yet)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

SMI = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.86.10              Driver Version: 570.86.10      CUDA Version: {cuda}     |
|-----------------------------------------+------------------------+----------------------+
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cuda", "wheel"),
    [("12.8", "cu128"), ("12.7", "cu126"), ("12.4", "cu124"), ("13.1", "cu130"),
     ("11.8", "cu118"), ("11.2", "cu126")],  # older than every wheel: the common default
)  # fmt: skip
def test_the_wheel_is_the_newest_the_driver_runs(cuda, wheel):
    proc = subprocess.run([sys.executable, "-S", str(REPO / "scripts" / "cuda_wheel.py")],
                          input=SMI.format(cuda=cuda), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == wheel


@pytest.mark.slow
def test_unreadable_nvidia_smi_output_names_the_default():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "cuda_wheel.py")],
                          input="NVIDIA-SMI has failed", capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "cu126"


@pytest.mark.slow
def test_setup_says_what_it_does_in_numbered_steps():
    text = (REPO / "scripts" / "setup.sh").read_text()
    steps = [line for line in text.splitlines() if line.lstrip().startswith("step ")]
    assert [s.split()[1] for s in steps] == ["1", "2", "2", "2", "3", "4"]
    assert "scripts/cuda_wheel.py" in text
    assert subprocess.run(["bash", "-n", str(REPO / "scripts" / "setup.sh")]).returncode == 0
