"""The install page (docs/getting-started/install.md) as written: the commands this machine
can run are run (``trainwell env``, the build check, the MPS command, which on a machine
without MPS is one clear line and exit 2); the ones for other machines (a GPU index, conda,
WSL2, another Python) are checked as bash and against the wheel indexes ``trainwell env``'s
advice knows, so the page and the advice cannot drift apart."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
import torch

from tests.docs.test_readme import python_script, trainwell
from tests.docs_pages import blocks, page
from trainwell.env import advice

PAGE = page("getting-started/install.md")
BASH = [body for lang, body in blocks(PAGE) if lang == "bash"]


@pytest.mark.slow
def test_every_command_block_is_valid_bash():
    assert len(BASH) >= 6
    for body in BASH:
        proc = subprocess.run(["bash", "-n"], input=body, capture_output=True, text=True)
        assert proc.returncode == 0, f"{body}\n{proc.stderr}"


def test_the_wheel_indexes_are_the_ones_the_advice_knows():
    known = {"cpu"} | {f"cu{a}{b}" for a, b in advice.CUDA_WHEELS}
    builds = re.findall(r"download\.pytorch\.org/whl/([\w.]+)", PAGE)
    assert {"cpu", "cu126"} <= set(builds) and any(b.startswith("rocm") for b in builds)
    for build in builds:
        assert build in known or re.fullmatch(r"rocm\d+\.\d+", build), build
    # The default CUDA build the page shows is the one the advice falls back to.
    default = "cu{}{}".format(*advice.DEFAULT_CUDA_WHEEL)
    assert f"whl/{default}" in PAGE


def test_trainwell_env_as_the_page_runs_it(tmp_path):
    (setup, env_line) = BASH[0].splitlines()
    assert setup == "bash scripts/setup.sh" and env_line == ".venv/bin/trainwell env"
    proc = trainwell(["env"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "cpu" in proc.stdout.lower()


def test_the_build_check_prints_what_the_page_says_it_prints(tmp_path):
    (line,) = next(b for b in BASH if b.startswith("python -c")).splitlines()
    args = shlex.split(line)
    assert args[:2] == ["python", "-c"], line
    (tmp_path / "check.py").write_text(args[2])  # run as written, in this process
    proc = python_script(tmp_path / "check.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    version, cuda, hip, available = proc.stdout.split()
    assert version == torch.__version__ and available == str(torch.cuda.is_available())
    assert cuda == str(torch.version.cuda) and hip == str(torch.version.hip)


@pytest.mark.slow  # the first in-process train command imports the training stack
def test_the_mps_command_is_one_line_where_there_is_no_mps(tmp_path, monkeypatch):
    (line,) = next(b for b in BASH if "PYTORCH_ENABLE_MPS_FALLBACK" in b).splitlines()
    assignment, *args = shlex.split(line)
    name, value = assignment.split("=")
    assert (name, value, args[0]) == ("PYTORCH_ENABLE_MPS_FALLBACK", "1", "trainwell")
    if torch.backends.mps.is_available():
        return  # on a Mac it trains: the slow tests' business, not this check's
    monkeypatch.setenv(name, value)  # the command's own environment, as the shell gives it
    proc = trainwell(args[1:], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "trainwell: error: run.device: mps asked for, but MPS is not available here"]
