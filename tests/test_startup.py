"""Start-up (issue 27 §5): ``trainwell --help`` and every verb's ``--help`` import no torch
(the package's names load on first use), and the package still gives every public name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


def _verbs() -> list[str]:
    from trainwell.cli import _parser

    parser = _parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    return sorted(sub.choices)


def _imported(args: list[str]) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "trainwell", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("import time:")]
    assert lines, "no -X importtime output"
    return {ln.rsplit("|", 1)[1].strip() for ln in lines}


@pytest.mark.slow
def test_every_verb_is_listed():
    assert {"train", "lr-find", "doctor", "env", "export", "predict", "report"} <= set(_verbs())


@pytest.mark.slow
@pytest.mark.parametrize("args", [[], *([v] for v in _verbs())], ids=lambda a: " ".join(a) or "-")
def test_help_imports_no_torch(args):
    modules = _imported([*args, "--help"])
    heavy = sorted(m for m in modules if m.split(".")[0] in {"torch", "numpy", "mlflow", "rich"})
    assert not heavy, heavy[:10]
    assert "trainwell.cli" in modules


@pytest.mark.slow
def test_the_public_names_load_on_first_use():
    code = (
        "import sys, trainwell\n"
        "assert 'torch' not in sys.modules\n"
        "import trainwell.predict\n"  # the subpackage: the name stays the function
        "assert callable(trainwell.predict) and trainwell.predict.__module__.startswith("
        "'trainwell.predict')\n"
        "from trainwell import fit, load_config, load_model, Config, FitResult, UserError\n"
        "assert trainwell.fit is fit and 'torch' in sys.modules\n"
        "assert trainwell.doctor.__name__ == 'trainwell.doctor'\n"
        "assert set(trainwell.__all__) <= set(dir(trainwell))\n"
        "try:\n    trainwell.nothing_here\nexcept AttributeError as e:\n    print(e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "has no attribute 'nothing_here'" in proc.stdout


def test_every_verb_names_its_output_place_out():
    from trainwell.cli import _parser

    (sub,) = [a for a in _parser()._actions if a.dest == "command"]
    for verb, parser in sub.choices.items():
        flags = {s for a in parser._actions for s in a.option_strings}
        other = flags & {"--output", "--out-dir", "--outdir", "--output-dir", "--dest"}
        assert not other or "--out" in flags, (verb, other)
