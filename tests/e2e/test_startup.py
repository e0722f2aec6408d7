"""Start-up (issue 27 §5): ``trainwell --help`` and every verb's ``--help`` import no torch
(the package's names load on first use), and the package still gives every public name."""

from __future__ import annotations

import json
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


# What a --help may load of trainwell itself: the parser and the verbs' modules (each
# imports its handler's code inside the handler), nothing of the engine, config or doctor.
_PARSER_MODULES = {"trainwell", "trainwell.cli", "trainwell.errors", "trainwell.printable",
                   "trainwell.trust"}  # fmt: skip
_HEAVY = {"torch", "numpy", "mlflow", "rich", "yaml", "sklearn", "PIL", "matplotlib"}


def test_help_loads_only_the_parser_counted_in_sys_modules():
    # -X importtime does not list modules loaded by importlib.import_module (the verbs'
    # modules are), so this counts sys.modules after each --help, in one interpreter.
    code = (
        "import json, sys\n"
        "from trainwell.cli import main\n"
        "seen = {}\n"
        "for verb in sys.argv[1:]:\n"
        "    try:\n"
        "        main([*verb.split(), '--help'])\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, (verb, e.code)\n"
        "    seen[verb] = sorted(m for m in sys.modules if m.split('.')[0] in WATCHED)\n"
        "sys.stdout = sys.__stdout__\n"
        "print('RESULT' + json.dumps(seen))\n"
    ).replace("WATCHED", repr(sorted({"trainwell", *_HEAVY})))
    proc = subprocess.run([sys.executable, "-c", code, "", *_verbs()], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.rsplit("RESULT", 1)[1])
    assert set(seen) == {"", *_verbs()}
    for verb, modules in seen.items():
        heavy = [m for m in modules if m.split(".")[0] in _HEAVY]
        assert not heavy, (verb, heavy[:10])
        other = [m for m in modules if m not in _PARSER_MODULES
                 and not m.startswith("trainwell.commands")]  # fmt: skip
        assert not other, (verb, other)
        assert "trainwell.commands.common" in modules


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
