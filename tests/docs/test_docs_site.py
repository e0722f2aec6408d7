"""The documentation site builds in strict mode (``mkdocs build --strict``, as CI runs it):
any warning (a broken link or anchor, a page outside the nav, a docstring the API reference
cannot read) fails the build, and so this test."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_the_site_builds_in_strict_mode_without_a_warning(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert "No module named mkdocs" not in log, "install the dev extra: pip install -e '.[dev]'"
    assert proc.returncode == 0, log[-4000:]
    assert "WARNING" not in log, log[-4000:]
    # The API reference is generated from the docstrings, not left empty.
    api = (tmp_path / "api" / "index.html").read_text()
    for name in ("trainwell.fit", "trainwell.load_config", "trainwell.Config",
                 "trainwell.FitResult", "trainwell.load_model", "trainwell.predict.predict",
                 "trainwell.engine.state.callbacks.Context", "trainwell.doctor.watch",
                 "trainwell.doctor.Doctor", "trainwell.doctor.Finding"):  # fmt: skip
        assert f'id="{name}"' in api, f"the API page lacks {name}"
    assert "Train a model as the config says" in api  # fit's docstring, rendered
    # Every finding code has its page in the site.
    from trainwell.doctor.codes import CODES

    for code in CODES:
        assert (tmp_path / "doctor" / code / "index.html").is_file(), code
