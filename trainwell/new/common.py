"""Files every new project gets, whatever its task (``${pkg}`` is the package name)."""

from __future__ import annotations

GITIGNORE = """\
# Run directories: metrics, checkpoints and exports, one folder per run.
runs/
__pycache__/
.pytest_cache/
*.egg-info/
"""

# At the project root, so pytest puts the root on sys.path: the tests import the code as
# the config names it (src.${pkg}...), from any working folder.
CONFTEST = '''\
"""pytest settings shared by the tests (the project root is on sys.path from here)."""
'''

PYPROJECT = """\
[project]
name = "${pkg}"
version = "0.1.0"
requires-python = ">=3.10"
dynamic = ["dependencies"]

[tool.setuptools.dynamic]
dependencies = { file = ["requirements.txt"] }

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]
"""

TEST_ENVIRONMENT = '''\
"""The environment check: what is installed is what requirements.txt pins.

A model that trained last month and not today is, more often than not, a library that
moved. `trainwell env` says what the machine offers PyTorch (devices, versions, threads).
"""

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import torch

PINS = Path(__file__).resolve().parents[1] / "requirements.txt"


def test_installed_versions_are_the_pinned_ones():
    wrong = []
    for line in PINS.read_text().splitlines():
        name, sep, pinned = line.split("#")[0].strip().partition("==")
        if not sep:
            continue
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = "not installed"
        # A build label (torch's +cpu, +cu126) is the same release.
        if installed.partition("+")[0] != pinned:
            wrong.append(f"{name}: pinned {pinned}, installed {installed}")
    assert not wrong, "; ".join(wrong) + " (pip install -r requirements.txt)"


def test_torch_computes_on_this_machine():
    x = torch.ones(4, 4)
    assert torch.equal(x @ x, torch.full((4, 4), 4.0))


def _gpus():
    found = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        found.append("mps")
    return found or [None]


@pytest.mark.parametrize("device", _gpus())
def test_each_gpu_computes_what_the_cpu_does(device):
    # A GPU can be listed and still fail its first kernel (a driver older than the wheel's
    # CUDA, a card this build has no kernels for): this says so before a training run does.
    if device is None:
        pytest.skip("no GPU on this machine")
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    got = (x.to(device) @ x.to(device)).cpu()
    assert torch.allclose(got, x @ x, rtol=1e-3, atol=1e-3)
'''

README = """\
# ${pkg}

A ${task} project started with `trainwell new`. Train, then test:

```bash
trainwell train --config configs/default.yaml
pytest
```

Each run writes a folder under `runs/` (config, metrics, curves, checkpoints). Then:

```bash
trainwell export runs/<run> --format onnx      # checked against PyTorch in ONNX Runtime
trainwell predict runs/<run> --split test      # ${predict_note}
```

## Layout

- `configs/default.yaml`: the run; any key can be overridden, e.g. `optim.lr=1e-3`
  (`trainwell train --help-config` lists them). It names the code by import path from
  this folder (`src.${pkg}.model:...`), so nothing needs installing.
- `src/${pkg}/model.py`: the model, a plain `nn.Module`.
- `src/${pkg}/data.py`: the data, plain `Dataset`s.${step_note}
- `tests/`: one batch through the model, overfitting one batch, a one-epoch run, and the
  environment check (installed versions against `requirements.txt`).
- `requirements.txt`: the versions this project was created with.
"""

TEST_TRAIN = '''\
"""A one-epoch run of the real config, end to end, in a temporary folder."""

import math
from pathlib import Path

import trainwell

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"


def test_one_epoch_run_of_the_config(tmp_path):
    cfg = trainwell.load_config(CONFIG, overrides=["train.epochs=1", f"run.dir={tmp_path}/run"])
    result = trainwell.fit(cfg)
    assert result.summary["status"] == "completed"
    assert result.metrics and all(math.isfinite(v) for v in result.metrics.values())
'''
