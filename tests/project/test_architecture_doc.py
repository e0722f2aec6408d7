"""The repository's map stays true: ARCHITECTURE.md, CONTRIBUTING.md and tests/README.md.

Their ``path:LINE`` (``Symbol``) references point at the symbol's current line (else:
``python scripts/update_architecture.py``), every path they name exists, every test file
is in tests/README.md's index, and their commands parse, name real files, and (the cheap
ones) run.
"""

from __future__ import annotations

import doctest
import functools
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "update_architecture.py"
_spec = importlib.util.spec_from_file_location("update_architecture", SCRIPT)
assert _spec is not None and _spec.loader is not None
arch = sys.modules["update_architecture"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(arch)

DOCS = ("ARCHITECTURE.md", "CONTRIBUTING.md", "tests/README.md")
# A path of the repository in backticks: `trainwell/engine/fit.py`, `tests/doctor_corpus/`.
PATH = re.compile(r"`((?:trainwell|tests|scripts|docs|examples|benchmarks|\.ci)/[\w./*<>-]*)")
FENCE = re.compile(r"```bash\n(.*?)```", re.DOTALL)
INLINE = re.compile(r"`((?:\.venv/bin/|python |bash )[^`]+)`")
# Commands cheap enough to run here (a few seconds), by what they contain.
RUN = ("update_architecture.py --check", "import_cycles.py", "ruff check --select C901")


def _text(doc: str) -> str:
    return (REPO / doc).read_text()


def test_the_documents_exist():
    for doc in DOCS:
        assert (REPO / doc).is_file(), doc


@pytest.mark.parametrize("doc", DOCS)
def test_every_reference_names_its_symbols_current_line(doc):
    problems = arch.problems(doc, _text(doc))
    assert not problems, "\n".join(map(str, problems)) + (
        "\nrun: python scripts/update_architecture.py (a missing symbol: fix it by hand)"
    )


def test_architecture_md_points_into_the_code():
    refs = arch.REFERENCE.findall(_text("ARCHITECTURE.md"))
    assert len(refs) >= 60  # the tours and the table are references, not prose
    symbols = {r[-1] for r in refs}
    for wanted in ("Trainer.train_step", "Stepper._update", "save_atomic", "default_probes",
                   "Dispatcher._post_step", "GraphRetainedProbe.on_step", "option"):  # fmt: skip
        assert wanted in symbols


def test_symbols_are_found_by_dotted_name_at_their_def_line():
    source = (
        "import x\n"
        "LIMIT: int = 3\n"
        "class A:\n"
        "    @property\n"
        "    def f(self):\n"
        "        def inner():\n"
        "            pass\n"
        "    class B:\n"
        "        async def g(self):\n"
        "            y = 1\n"
    )
    table = arch.symbols(source)
    assert table == {"LIMIT": 2, "A": 3, "A.f": 5, "A.f.inner": 6, "A.B": 8, "A.B.g": 9}


def test_a_moved_symbol_is_rewritten_and_a_missing_one_is_reported(tmp_path):
    (tmp_path / "pkg").mkdir()
    module = tmp_path / "pkg" / "m.py"
    module.write_text(
        "\n\nclass Loop:\n    def step(self):\n        pass\n\n\ndef run():\n    pass\n"
    )
    text = (
        "The step: `pkg/m.py:1` (`Loop.step`), wrapped `pkg/m.py:8`\n"
        "  (`run`); current `pkg/m.py:3` (`Loop`); gone `pkg/m.py:5` (`Loop.stop`);\n"
        "no file `pkg/none.py:2` (`x`); bare `pkg/m.py:4`.\n"
    )
    problems = arch.problems("DOC", text, tmp_path)
    by_symbol = {p.symbol: p for p in problems}
    assert by_symbol["Loop.step"].line == 4
    assert "run" not in by_symbol and "Loop" not in by_symbol
    assert by_symbol["Loop.stop"].line is None and "defines no Loop.stop" in str(
        by_symbol["Loop.stop"]
    )
    assert by_symbol["x"].line is None and "does not exist" in by_symbol["x"].reason
    assert any(p.symbol == "" and p.path == "pkg/m.py:4" for p in problems)  # the bare one
    fixed = arch.rewritten("DOC", text, tmp_path)
    assert "`pkg/m.py:4` (`Loop.step`)" in fixed
    assert "`pkg/m.py:8`\n  (`run`)" in fixed  # a wrapped reference keeps its line break
    assert "`pkg/m.py:5` (`Loop.stop`)" in fixed  # nothing to rewrite it to
    # Moving the code again moves the reference again.
    module.write_text("# a line\n" + module.read_text())
    again = arch.rewritten("DOC", fixed, tmp_path)
    assert "`pkg/m.py:5` (`Loop.step`)" in again and "`pkg/m.py:9`\n  (`run`)" in again


def test_the_scripts_docstring_examples():
    result = doctest.testmod(arch, verbose=False)
    assert result.attempted >= 1 and result.failed == 0


@pytest.mark.slow  # a process that imports the config (and torch)
def test_update_docs_refreshes_the_references_too(tmp_path):
    # A copy of the repository's shape: the two scripts, a config page with the reference
    # markers, and an ARCHITECTURE.md whose one reference went stale.
    (tmp_path / "scripts").mkdir()
    (tmp_path / "docs").mkdir()
    for name in ("update_docs.py", "update_architecture.py"):
        shutil.copy(REPO / "scripts" / name, tmp_path / "scripts" / name)
    page = "# x\n<!-- config-reference:start -->\nold\n<!-- config-reference:end -->\n"
    (tmp_path / "docs" / "config.md").write_text(page)
    (tmp_path / "m.py").write_text("\n\ndef moved():\n    pass\n")
    (tmp_path / "ARCHITECTURE.md").write_text("see `m.py:1` (`moved`)\n")
    proc = subprocess.run([sys.executable, "scripts/update_docs.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "ARCHITECTURE.md").read_text() == "see `m.py:3` (`moved`)\n"
    assert "| `optim.lr` |" in (tmp_path / "docs" / "config.md").read_text()


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_named_exists(doc):
    missing = []
    for path in PATH.findall(_text(doc)):
        if "<" in path or "*" in path:
            continue  # a pattern: `trainwell/doctor/probes/<code>.py`
        if not (REPO / path.rstrip("/")).exists():
            missing.append(path)
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def test_every_test_file_is_in_the_index():
    index = _text("tests/README.md")
    # Every folder's (tests/unit/engine/... too), named by its path from the root.
    files = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "tests").rglob("test_*.py"))
    assert "tests/unit/engine/test_unit_trainer.py" in files  # the glob reaches the folders
    absent = [name for name in files if f"`{name}`" not in index]
    assert not absent, f"tests/README.md does not say what these cover: {absent}"


def _commands() -> list[tuple[str, str]]:
    found = []
    for doc in ("CONTRIBUTING.md", "tests/README.md", "ARCHITECTURE.md"):
        text = _text(doc)
        for block in FENCE.findall(text):
            found += [(doc, line) for line in block.splitlines() if line.strip()]
        found += [(doc, m) for m in INLINE.findall(text)]
    return list(dict.fromkeys(found))  # each (document, command) once


COMMANDS = _commands()


def _argv(words: list[str]) -> list[str]:
    """The command as it runs here: the interpreter and tools of this environment (a
    worktree has no .venv of its own)."""
    tool = {"python": sys.executable, ".venv/bin/python": sys.executable}
    head = words[0]
    if head in tool:
        return [tool[head], *words[1:]]
    if head.startswith(".venv/bin/"):
        name = head.rsplit("/", 1)[1]
        exe = Path(sys.executable).parent / name
        return [str(exe if exe.exists() else shutil.which(name) or name), *words[1:]]
    return words


def test_there_are_commands_to_check():
    assert len(COMMANDS) >= 10


@pytest.mark.parametrize("doc,command", COMMANDS, ids=[c for _, c in COMMANDS])
def test_each_command_parses_and_names_real_files(doc, command):
    words = shlex.split(command)
    assert words[0] in ("python", "bash") or words[0].startswith(".venv/bin/"), command
    for word in words[1:]:
        if "<" in word or word.startswith("-") or "::" in word:
            continue
        if word.endswith((".py", ".sh", ".md")) or word.startswith(("tests/", "scripts/")):
            path = (REPO / word) if not word.startswith("../") else (REPO / word).resolve()
            if word.startswith("../shared/") and not path.exists():
                continue  # beside /work/main, not beside a worktree: run below where it is
            assert path.exists(), f"{doc}: {command}: {word} does not exist"
        if word.startswith("tests/") and "::" not in word and word.endswith(".py"):
            assert (REPO / word).is_file()
    if "::" in command:
        file, _, name = next(w for w in words if "::" in w).partition("::")
        assert re.search(rf"^def {re.escape(name)}\(", (REPO / file).read_text(), re.M), command


PYTEST = [(d, c) for d, c in COMMANDS if "-m pytest" in c and "tests/" in c and "<" not in c]

# Every documented pytest command collected in turn by one process (each its own
# pytest.main with the command's own options and files): the test modules are imported
# once for all of them, where a process per command imported torch and them again.
COLLECT = """
import contextlib, io, json, sys
import pytest
results = []
for args in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = pytest.main([*args, "--collect-only", "-q", "-p", "no:cacheprovider"])
    results.append([int(code), out.getvalue()])
print("\\n" + json.dumps(results))
"""


def _pytest_args(command: str) -> list[str]:
    argv = _argv(shlex.split(command))
    assert argv[:3] == [sys.executable, "-m", "pytest"], command
    return argv[3:]


@functools.cache
def _collected() -> dict[str, tuple[int, str]]:
    """Each PYTEST command's exit code and output, collected in one process."""
    commands = list(dict.fromkeys(c for _, c in PYTEST))
    proc = subprocess.run([sys.executable, "-c", COLLECT,
                           json.dumps([_pytest_args(c) for c in commands])], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads(proc.stdout.rstrip().rsplit("\n", 1)[-1])
    assert len(results) == len(commands), proc.stdout[-2000:]
    return {c: (code, out) for c, (code, out) in zip(commands, results)}


@pytest.mark.slow  # one process for all of them (torch's import, every test module's)
@pytest.mark.parametrize("doc,command", PYTEST, ids=[c for _, c in PYTEST])
def test_each_pytest_command_selects_tests(doc, command):
    # Collection only: the options parse, the files exist, -k / -m select something.
    code, out = _collected()[command]
    assert code == 0, f"{doc}: {command}\n{out[-3000:]}"
    assert re.search(r"^\d+ tests? collected|^tests/", out, re.M), out[-500:]


CHEAP = [(d, c) for d, c in COMMANDS if any(r in c for r in RUN)]


@pytest.mark.slow
@pytest.mark.parametrize("doc,command", CHEAP, ids=[c for _, c in CHEAP])
def test_the_cheap_commands_run(doc, command):
    words = shlex.split(command)
    if "../shared/tools/" in command and not (REPO / words[1]).resolve().exists():
        pytest.skip(f"{words[1]} is not beside the repository")
    code, out = _ran(command)
    assert code == 0, f"{doc}: {command}\n{out}"


@functools.cache
def _ran(command: str) -> tuple[int, str]:
    """A cheap command's exit code and output's tail: run once, though two documents
    show it."""
    proc = subprocess.run(_argv(shlex.split(command)), cwd=REPO, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    return proc.returncode, proc.stdout[-2000:] + proc.stderr[-2000:]
