"""Every example of the README and the docs pages runs as written (or is, line for line, in the
file it names); tests/docs_pages.py says where they are read from."""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, read_summary, run_subprocess
from tests.docs_pages import docs_text
from trainwell.cli import main

README = docs_text()  # README.md and docs/: the examples moved to the pages by topic
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.S)


def block(lang: str, first_line: str) -> str:
    found = [body for kind, body in BLOCKS if kind == lang and body.startswith(first_line)]
    assert len(found) == 1, f"README/docs: expected one {lang} block starting {first_line!r}"
    return found[0]


@contextlib.contextmanager
def _inside(cwd):
    """Run in ``cwd`` as a command started there would: the folder current, importable
    (its user modules: models.py, mylog.py...) and on PYTHONPATH for the processes a
    command starts; afterwards all of it undone and the folder's modules forgotten, so
    the next example's files of the same name are imported afresh."""
    cwd = Path(cwd).resolve()
    old_dir, old_path, old_env = os.getcwd(), list(sys.path), os.environ.get("PYTHONPATH")
    before = set(sys.modules)
    os.chdir(cwd)
    sys.path.insert(0, str(cwd))
    os.environ["PYTHONPATH"] = f"{REPO}{os.pathsep}{cwd}"
    try:
        yield
    finally:
        os.chdir(old_dir)
        sys.path[:] = old_path
        if old_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_env
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file.startswith(str(cwd)):
                del sys.modules[name]


def _captured(call, cwd) -> subprocess.CompletedProcess:
    out, err = io.StringIO(), io.StringIO()
    with _inside(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = call()
        except SystemExit as exc:  # argparse's errors, a script's exit()
            code = exc.code if isinstance(exc.code, int) else (exc.code is not None)
    return subprocess.CompletedProcess([], code or 0, out.getvalue(), err.getvalue())


def trainwell(args: list[str], cwd) -> subprocess.CompletedProcess:
    """``trainwell ARGS`` run from ``cwd``, in this process (the command's own entry point,
    :func:`trainwell.cli.main`: a fraction of a second where a new process imports torch
    for 4-5 s); a launch of several processes (``--nproc N``) stays a real launch."""
    if "--nproc" in args and args[args.index("--nproc") + 1] != "1":
        return run_subprocess(args, Path(cwd), timeout=300)
    return _captured(lambda: main(args), cwd)


def python_script(path, cwd) -> subprocess.CompletedProcess:
    """``python PATH`` run from ``cwd``, in this process (as ``__main__``, as written)."""
    def call() -> int:
        runpy.run_path(str(path), run_name="__main__")
        return 0

    return _captured(call, cwd)


def run_commands(first_line: str, cwd) -> list[str]:
    """Run each line of the README's bash block starting ``first_line`` (each a
    ``trainwell`` command) in ``cwd``, as written; their outputs, after each succeeded."""
    outputs = []
    for line in block("bash", first_line).splitlines():
        args = shlex.split(line)
        assert args[0] == "trainwell"
        proc = trainwell(args[1:], cwd)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        outputs.append(proc.stdout)
    return outputs


@pytest.mark.slow
def test_train_your_own_model_runs_as_written(tmp_path):
    (tmp_path / "models.py").write_text(block("python", "# models.py"))
    (tmp_path / "my.yaml").write_text(block("yaml", "# my.yaml"))
    commands = block("bash", "trainwell train --config my.yaml")
    for line in commands.splitlines():
        args = shlex.split(line.split("#")[0])
        assert args[0] == "trainwell"
        proc = trainwell([*args[1:], "train.precision=fp32"], tmp_path)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        if "--dry-run" in line:
            assert "dry run" in proc.stdout
    (run,) = (tmp_path / "runs").iterdir()  # the run of the first command
    assert read_summary(run)["final"]["val/accuracy"] > 0.9
    # The Python example, as written, next to models.py and my.yaml.
    script = block("python", "import torch, trainwell\nfrom models import")
    (tmp_path / "example.py").write_text(script)
    proc = python_script(tmp_path / "example.py", tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.split()[-1]) > 0.75  # the printed val/accuracy (chance: 0.5)


def test_task_snippets_are_the_example_files_line_for_line():
    shown = 0
    for lang, body in BLOCKS:
        header = body.splitlines()[0] if body else ""
        match = re.match(r"# (?:examples/tasks/)?(\w+\.(?:py|yaml))", header)
        if lang not in ("python", "yaml") or not match:
            continue
        path = REPO / "examples" / "tasks" / match.group(1)
        if not path.exists():
            continue
        source = path.read_text().splitlines()
        at = 0
        for line in body.splitlines()[1:]:
            if not line.strip():
                continue
            assert line in source[at:], f"README line not in {path.name} (in order): {line!r}"
            at = source.index(line, at) + 1
        shown += 1
    assert shown >= 8  # every task kind, the step section's excerpt included
