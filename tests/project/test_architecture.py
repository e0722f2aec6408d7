"""The architecture's rules, checked: the doctor's layers and the engine's import downward
only (the contracts are in pyproject.toml, run by import-linter), and no module is in an
import cycle."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_the_doctors_and_the_engines_layers_import_downward_only():
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (it is in the dev extra)")
    proc = subprocess.run([str(exe)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 kept, 0 broken" in proc.stdout
    for contract in ("the doctor's layers import downward only",
                     "the engine's layers import downward only"):
        assert f"{contract} KEPT" in proc.stdout, proc.stdout[-3000:]


@pytest.mark.slow
def test_no_module_is_in_an_import_cycle():
    tool = REPO.parent / "shared" / "tools" / "import_cycles.py"
    if not tool.exists():
        pytest.skip(f"{tool} is not beside the repository")
    proc = subprocess.run([sys.executable, str(tool), "trainwell"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert "import cycles in trainwell: 0" in proc.stdout, proc.stdout[-3000:]
