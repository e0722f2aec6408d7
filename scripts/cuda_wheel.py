"""Print the PyTorch CUDA wheel index (``cu126``, ...) for the driver that ``nvidia-smi``
(its output on stdin) reports: the newest one the driver runs. Used by ``setup.sh`` before
torch is installed, so it reads trainwell's own table without importing trainwell (whose
``env`` package imports torch).

    nvidia-smi | python scripts/cuda_wheel.py        # -> cu128
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ADVICE = Path(__file__).resolve().parent.parent / "trainwell" / "env" / "advice.py"


def wheel_for(smi_output: str) -> str:
    spec = importlib.util.spec_from_file_location("_trainwell_advice", ADVICE)
    assert spec is not None and spec.loader is not None
    advice = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(advice)
    match = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", smi_output)
    driver = (int(match.group(1)), int(match.group(2))) if match else None
    return advice._cuda_wheel_for(driver)


if __name__ == "__main__":
    print(wheel_for(sys.stdin.read()))
