"""``trainwell new``: a project laid out the way seasoned engineers lay one out, that trains
and passes its own tests right away.

Templates are Python string modules in this package (``classification``, ``regression``,
``language_model``; ``common`` for the files all share), so they ship with the package.
The project is written into a temporary folder beside ``DIR`` and renamed onto it when
complete: an interrupted ``new`` leaves no half project.

Example:
    >>> import tempfile
    >>> project = new_project(Path(tempfile.mkdtemp()) / "digits-demo")
    >>> project.package, sorted(str(p) for p in project.files)[:2]
    ('digits_demo', ['.gitignore', 'README.md'])
"""

from __future__ import annotations

import importlib
import keyword
import os
import re
import shutil
import string
import tempfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from trainwell.errors import UserError
from trainwell.new import common

TASKS = {"classification": "classification", "regression": "regression",
         "language-model": "language_model"}  # fmt: skip
# Pinned in requirements.txt when installed: what the project's code and tests import.
PINNED = ("trainwell", "torch", "numpy", "pytest")


@dataclass
class Project:
    """A project written by :func:`new_project`."""

    root: Path
    package: str
    files: list[Path]


def new_project(directory: str | Path, task: str = "classification") -> Project:
    """Write a ``task`` project into ``directory`` (created; refused unless empty).

    Example:
        >>> new_project("my-project", task="regression")  # doctest: +SKIP
    """
    if task not in TASKS:
        raise UserError(f"--task: unknown task {task!r}; choose from {', '.join(TASKS)}")
    root = Path(directory)
    _check_target(root)
    package = package_name(root)
    files = render(task, package)
    _write_all(root, files)
    return Project(root, package, sorted(files))


def package_name(root: Path) -> str:
    """A Python package name from the folder's name (``My-Project`` -> ``my_project``).

    Example:
        >>> package_name(Path("2024 Cats-vs-Dogs"))
        'p2024_cats_vs_dogs'
    """
    name = re.sub(r"\W+", "_", root.resolve().name.lower()).strip("_")
    if not name:
        return "project"
    if name[0].isdigit():
        name = f"p{name}"
    return f"{name}_" if keyword.iskeyword(name) else name


def render(task: str, package: str) -> dict[Path, str]:
    """Every file of a ``task`` project for ``package``: path -> text."""
    tpl = importlib.import_module(f"trainwell.new.{TASKS[task]}")
    step_note = f"\n- `src/{package}/step.py`: the step (forward and loss of one batch)."
    values = {
        "pkg": package,
        "task": task.replace("-", " "),
        "predict_note": tpl.PREDICT_NOTE,
        "step_note": step_note if tpl.STEP else "",
    }
    src = Path("src") / package
    files = {
        Path("configs/default.yaml"): tpl.CONFIG,
        src / "__init__.py": f'"""{package}: a {values["task"]} project."""\n',
        src / "model.py": tpl.MODEL,
        src / "data.py": tpl.DATA,
        Path("tests/test_model.py"): tpl.TEST_MODEL,
        Path("tests/test_train.py"): common.TEST_TRAIN,
        Path("tests/test_environment.py"): common.TEST_ENVIRONMENT,
        Path("conftest.py"): common.CONFTEST,
        Path("pyproject.toml"): common.PYPROJECT,
        Path("README.md"): common.README,
        Path(".gitignore"): common.GITIGNORE,
    }
    if tpl.STEP:
        files[src / "step.py"] = tpl.STEP
    rendered = {p: string.Template(t).safe_substitute(values) for p, t in files.items()}
    rendered[Path("requirements.txt")] = requirements()
    return rendered


def requirements() -> str:
    """``name==version`` of what the project imports, as installed here, in a form a fresh
    machine's ``pip install -r`` accepts.

    A local version label (torch's ``+cpu``, ``+cu121``) is served only by PyTorch's own
    index, so the pin is the public version and a comment names the index for that build.
    trainwell run from a source checkout is not on the package index: a comment says how
    to install it instead of a pin that cannot resolve.

    Example:
        >>> print(requirements().splitlines()[0])
        # The versions this project was created with (pip install -r requirements.txt).
    """
    lines = ["# The versions this project was created with (pip install -r requirements.txt)."]
    for name in PINNED:
        try:
            installed = version(name)
        except PackageNotFoundError:
            continue
        if name == "trainwell" and _from_source():
            source = Path(__file__).resolve().parents[2]
            lines.append(f"# trainwell {installed} runs from its source here; install it the "
                         f"same way: pip install -e {source}")  # fmt: skip
            continue
        public, _, local = installed.partition("+")
        if local and local != "cpu":
            lines.append(f"# {name} {installed}: from PyTorch's index, pip install -r "
                         f"requirements.txt --extra-index-url "
                         f"https://download.pytorch.org/whl/{local}")  # fmt: skip
        lines.append(f"{name}=={public}")
    return "\n".join(lines) + "\n"


def _from_source() -> bool:
    """Whether this trainwell is a source checkout (not installed into site-packages)."""
    parts = Path(__file__).resolve().parts
    return not any(p in ("site-packages", "dist-packages") for p in parts)


def _check_target(root: Path) -> None:
    if root.is_dir() and any(root.iterdir()):
        raise UserError(f"new: {root} is not empty; give a new or empty folder")
    if root.exists() and not root.is_dir():
        raise UserError(f"new: {root} exists and is not a folder")


def _write_all(root: Path, files: dict[Path, str]) -> None:
    parent = root.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".tmp", dir=parent))
    except OSError as exc:
        raise UserError(f"new: cannot write {root}: {exc.strerror or exc}") from None
    try:
        for rel, text in files.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_text(text)
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp's folder is private (0700)
        if root.is_dir():
            root.rmdir()  # empty, checked above; a file appearing since makes this fail
        os.rename(staging, root)
    except OSError as exc:
        raise UserError(f"new: cannot write {root}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already after the rename


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
