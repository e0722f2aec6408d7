"""The "Deploying a model you passed to fit" example (docs/deploy-fit.md; the README's
section of that name summarizes it and links there) runs as written."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from tests.conftest import REPO
from tests.docs.test_readme import python_script, trainwell

HEADING = "### Deploying a model you passed to `fit`"


def section() -> str:
    for path in (REPO / "docs" / "deploy-fit.md",):
        text = path.read_text() if path.exists() else ""
        if HEADING in text:
            body = text.split(HEADING, 1)[1]
            return re.split(r"\n##+ ", body, maxsplit=1)[0]  # the next heading
    raise AssertionError(f"no section {HEADING!r} in docs/deploy-fit.md")


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section(), flags=re.S)


def python(code: str, cwd) -> subprocess.CompletedProcess:
    """``python -c CODE`` in ``cwd``, run in this process (tests/docs/test_readme.py)."""
    script = cwd / "_snippet.py"
    script.write_text(code)
    try:
        return python_script(script, cwd)
    finally:
        script.unlink()


@pytest.mark.slow
def test_the_deploy_example_runs_as_written(tmp_path):
    files = [b for b in blocks("python") if re.match(r"# \w+\.py\n", b)]
    for body in files:
        (tmp_path / body.split("\n", 1)[0][2:]).write_text(body)
    assert {"deploy_models.py", "train_deploy.py"} <= {p.name for p in tmp_path.iterdir()}
    (commands,) = blocks("bash")
    outputs = []
    for line in commands.strip().splitlines():
        args = shlex.split(line)
        if args[0] == "python":
            proc = python((tmp_path / args[1]).read_text(), tmp_path)
        else:
            assert args[0] == "trainwell"
            proc = trainwell(args[1:], tmp_path)
        assert proc.returncode == 0, f"{line}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"
        outputs.append(proc.stdout)
    assert float(outputs[0].split()[-1]) > 0.7  # val/accuracy; chance is about 0.4
    assert "cannot be rebuilt" not in outputs[0]
    assert "wrote runs/deploy/checkpoints/best.onnx (checked)" in outputs[1]

    # The run and its ONNX file predict the same classes for the same 8 inputs.
    def classes(out: str) -> list[str]:
        return [line.split()[1] for line in out.splitlines() if re.match(r"\s+\d+\s+\d+$", line)]

    assert len(classes(outputs[2])) == 8 and classes(outputs[2]) == classes(outputs[3])
    # The Python example: a Classifier back, in eval mode.
    (load,) = [b for b in blocks("python") if "trainwell.load_model(" in b and "# " not in b[:2]]
    proc = python(load + "\nprint(type(model).__name__, model.training)\n", tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "Classifier False"
