"""trainwell new: each template trains and passes its own tests at once, in a temporary
folder; the README's section on new, export and predict runs as written."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import REPO, read_summary
from tests.docs_pages import page
from trainwell.cli import main
from trainwell.new import new_project, package_name

SECTION = "# From a new project to a deployed model"


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    """A command as a user types it, ``trainwell ...`` or ``pytest``, with this Python."""
    head = [sys.executable, "-m", "trainwell"]
    if args[0] == "pytest":
        head = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # trainwell itself; nothing of the project
    return subprocess.Popen([*head, *args[1:]], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def finish(proc: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return finish(start(args, cwd))


def check_project(root: Path, package: str) -> None:
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert {"configs/default.yaml", f"src/{package}/model.py", f"src/{package}/data.py",
            "tests/test_model.py", "tests/test_train.py", "tests/test_environment.py",
            "requirements.txt", "README.md", ".gitignore"} <= files  # fmt: skip
    pins = (root / "requirements.txt").read_text().splitlines()
    # The public version: a local label (+cpu) is not served by the package index.
    assert f"torch=={version('torch').partition('+')[0]}" in pins
    assert not [p for p in pins if "==" in p and "+" in p]
    assert not [p for p in pins if p.startswith("trainwell==")]  # a checkout: not on PyPI
    assert "runs/" in (root / ".gitignore").read_text().splitlines()
    readme = (root / "README.md").read_text()
    assert "trainwell train --config configs/default.yaml\npytest\n" in readme


@pytest.mark.slow
@pytest.mark.parametrize("task", ["regression", "language-model"])
def test_a_new_project_trains_and_passes_its_own_tests(tmp_path, task, monkeypatch, capsys):
    # `trainwell new` in-process (the README's section runs it as a command); the project's
    # tests and its training as a user runs them.
    monkeypatch.chdir(tmp_path)
    assert main(["new", "my-project", "--task", task]) == 0, capsys.readouterr().err
    root = tmp_path / "my-project"
    check_project(root, "my_project")
    assert (root / "src/my_project/step.py").exists() == (task == "language-model")
    # Both at once: independent, and each mostly waits for imports.
    testing = start(["pytest"], root)
    training = start(["trainwell", "train", "--config", "configs/default.yaml", "run.dir=runs/a"],
                     root)  # fmt: skip
    tests, train = finish(testing), finish(training)
    assert tests.returncode == 0, tests.stdout[-3000:]
    assert re.search(r"\b[56] passed\b", tests.stdout), tests.stdout
    assert train.returncode == 0, train.stderr[-3000:]
    summary = read_summary(root / "runs" / "a")
    assert summary["status"] == "completed"
    if task == "language-model":
        assert summary["final"]["val/ppl"] < 0.5 * len(" .abcdefghijklmnopqrstuvwxyz")


def readme_section() -> str:
    text = page("deploy.md")  # the README's section, moved to its page
    assert text.startswith(SECTION), "docs/deploy.md: no section on new, export and predict"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


@pytest.mark.slow
def test_the_readme_section_runs_as_written(tmp_path):
    """The classification template, end to end: the README's commands, then its Python."""
    section = readme_section()
    bash = re.findall(r"```bash\n(.*?)```", section, flags=re.S)[0]
    cwd = tmp_path
    for line in bash.splitlines():
        args = shlex.split(line.split("#")[0])
        if args[0] == "cd":
            cwd = cwd / args[1]
            continue
        proc = run(args, cwd)
        assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        if args[:2] == ["trainwell", "new"]:
            check_project(cwd / args[2], package_name(Path(args[2])))
        if args[:2] == ["trainwell", "predict"]:
            accuracy = float(re.search(r"accuracy: ([\d.]+)", proc.stdout).group(1))
            assert accuracy > 0.9, proc.stdout
    (python,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    (cwd / "example.py").write_text(python)
    proc = subprocess.run([sys.executable, "example.py"], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert float(proc.stdout.split()[-1]) > 0.9  # the printed accuracy


def test_new_writes_into_an_empty_or_missing_folder_only(tmp_path):
    (tmp_path / "empty").mkdir()
    project = new_project(tmp_path / "empty", "classification")
    assert project.package == "empty" and (tmp_path / "empty" / "src" / "empty").is_dir()
    nested = new_project(tmp_path / "a" / "2nd Try", "regression")
    assert nested.package == "p2nd_try" and (nested.root / "src/p2nd_try/model.py").is_file()
    assert not [p for p in (tmp_path / "a").iterdir() if p.name.startswith(".")]


def test_the_templates_are_valid_python_and_yaml():
    import ast

    import yaml

    from trainwell.new import TASKS, render

    for task in TASKS:
        for path, text in render(task, "demo").items():
            if path.suffix == ".py":
                ast.parse(text, str(path))
            elif path.suffix == ".yaml":
                assert yaml.safe_load(text)["model"]["name"].startswith("src.demo.model:")


@pytest.mark.parametrize(
    ("installed", "pin", "comment"),
    [
        ("2.13.0+cpu", "torch==2.13.0", None),
        ("2.13.0+cu126", "torch==2.13.0", "https://download.pytorch.org/whl/cu126"),
        ("2.13.0+rocm6.3", "torch==2.13.0", "https://download.pytorch.org/whl/rocm6.3"),
        ("2.13.0", "torch==2.13.0", None),
    ],
)
def test_requirements_pin_what_the_package_index_serves(monkeypatch, installed, pin, comment):
    import trainwell.new as new

    real = new.version
    monkeypatch.setattr(new, "version", lambda n: installed if n == "torch" else real(n))
    lines = new.requirements().splitlines()
    assert [ln for ln in lines if ln.startswith("torch==")] == [pin]
    notes = [ln for ln in lines if ln.startswith("# torch")]
    assert (notes[0].endswith(comment) if comment else not notes), lines
