"""Where a verb may write a file the user named: one check for every ``--out``,
``--json``, ``--output`` and ``--apply``, made before any work.

Refused, each in one line (a :class:`~trainwell.errors.UserError`, exit code 2):

- a folder where a file goes, a file where a folder goes, a folder that does not exist;
- one of the verb's own inputs (the checkpoint or model being read, the input array, the
  config, the script), under any spelling: a symlink, a hard link, ``a/../b``;
- a run directory's own files (``config.yaml``, ``env.json``, ``metrics.csv``,
  ``summary.json``, ``curves.png``, ``doctor.json``, ``report.html``, the lock and
  temporary files), anything in its ``checkpoints/`` or ``tensorboard/``;
- any existing checkpoint file (``.pt``, ``.pth``, ``.ckpt``).

``trainwell export`` writes its artifacts beside the checkpoint (``checkpoints/best.onnx``)
by default, so it alone may write new, non-checkpoint files in ``checkpoints/``.
Other existing files are replaced, as ``cp`` and ``torch.save`` do (none of the verbs
has a ``--force``: the destinations refused here are the ones no flag should unlock).

Example:
    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> _ = (run / "summary.json").write_text("{}")
    >>> check_output(run / "summary.json", "--out", verb="predict")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainwell.errors.UserError: predict: --out .../summary.json is the run's summary.json ...
    >>> check_output(run / "preds.csv", "--out", verb="predict").name
    'preds.csv'
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from trainwell.errors import UserError

# Files a checkpoint is made of: never replaced by an output.
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")
# A run directory's own files (DESIGN.md's layout), written by the run itself.
RUN_FILES = ("config.yaml", "env.json", "metrics.csv", "summary.json", "curves.png",
             "doctor.json", "report.html")  # fmt: skip
RUN_FOLDERS = ("checkpoints", "tensorboard")
# A checkpoint's own name in checkpoints/: a file or a sharded (DCP) folder.
_CHECKPOINT_NAME = re.compile(r"(last|best|step-\d+)(\.pt)?")

Inputs = Iterable[tuple[str | os.PathLike[str] | None, str]]


def check_output(
    path: str | os.PathLike[str],
    flag: str,
    *,
    verb: str | None = None,
    inputs: Inputs = (),
    own: tuple[str, ...] = (),
    beside_checkpoints: bool = False,
    folder_made: bool = False,
) -> Path:
    """Refuse ``path`` as the file a verb writes (see the module's list); returns it.

    ``inputs`` are ``(path, what it is)`` pairs of what the verb reads ("the checkpoint
    being exported"); ``own`` names run files this verb writes itself (``report``:
    ``report.html``); ``beside_checkpoints`` lets ``export`` write a new artifact in
    ``checkpoints/``; ``folder_made`` skips the parent-folder check (the verb makes it).

    Example:
        >>> check_output("x.npy", "--out", verb="predict", inputs=[("x.npy", "the input")])
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: predict: --out x.npy is the input; choose another path
    """
    out = Path(path)
    what = f"{verb}: {flag}" if verb else flag
    for source, name in inputs:  # first: the worst mistake, under any spelling
        if source is not None and _same(out, Path(source)):
            raise UserError(f"{what} {out} is {name}; choose another path")
    if out.is_dir():
        raise UserError(f"{what} {out} is a folder; give the file to write")
    if not folder_made and not out.parent.is_dir():
        raise UserError(f"{what} {out}: the folder {out.parent} does not exist")
    reserved = reserved_part(out, own=own, beside_checkpoints=beside_checkpoints)
    if reserved is not None:
        raise UserError(
            f"{what} {out} is {reserved}; the run writes it itself: choose a path outside "
            "the run's own files"
        )
    if out.is_file() and out.suffix in CHECKPOINT_SUFFIXES:
        raise UserError(f"{what} {out} would replace an existing checkpoint; choose another path")
    return out


def check_output_dir(
    path: str | os.PathLike[str],
    flag: str,
    files: Iterable[str],
    *,
    verb: str | None = None,
    inputs: Inputs = (),
) -> Path:
    """Refuse ``path`` as a folder a verb writes ``files`` into (made if missing): a
    file, a run's reserved folder, or any of ``files`` refused by :func:`check_output`.

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> (run / "checkpoints").mkdir(); _ = (run / "summary.json").write_text("{}")
        >>> check_output_dir(run / "checkpoints", "--out", ["trace.json"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: --out .../checkpoints is in the run's checkpoints/ ...
    """
    folder = Path(path)
    what = f"{verb}: {flag}" if verb else flag
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{what} {folder} is a file; give a folder")
    reserved = reserved_part(folder / "_")
    if reserved is not None:
        raise UserError(f"{what} {folder} is in {reserved}; choose another folder")
    for name in files:
        check_output(folder / name, flag, verb=verb, inputs=inputs, folder_made=True)
    return folder


def reserved_part(
    path: str | os.PathLike[str], own: tuple[str, ...] = (), beside_checkpoints: bool = False
) -> str | None:
    """What ``path`` is among a run directory's own files ("the run's summary.json (run
    directory R)"), or ``None`` when it is none of them.

    Example:
        >>> reserved_part("/no/run/here/preds.csv") is None
        True
    """
    try:
        resolved = Path(path).resolve()
    except OSError:  # a symlink loop: judged as spelled
        resolved = Path(os.path.abspath(path))
    for up, root in enumerate(list(resolved.parents)[:4]):
        if not _is_run_dir(resolved, up):
            continue
        parts = resolved.relative_to(root).parts
        name = _reserved_name(parts, own, beside_checkpoints)
        return None if name is None else f"the run's {name} (run directory {root})"
    return None


def _reserved_name(parts: tuple[str, ...], own: tuple[str, ...], beside: bool) -> str | None:
    head = parts[0]
    if len(parts) == 1:
        if head in RUN_FILES and head not in own:
            return head
        return head if head.startswith(".") and head != "." else None  # the lock, temp files
    if head == "checkpoints" and beside and len(parts) == 2:
        # export's artifacts go beside the checkpoint; a checkpoint's own name does not.
        name = parts[1]
        ckpt = _CHECKPOINT_NAME.fullmatch(name) or name.startswith(".")
        return f"checkpoints/{name}" if ckpt else None
    return f"{head}/" if head in RUN_FOLDERS else None


def _is_run_dir(resolved: Path, up: int) -> bool:
    """Whether the ``up``-th parent of ``resolved`` is a run directory: it has a
    summary, or checkpoints/ with a config or metrics beside it."""
    root = resolved.parents[up]
    if (root / "summary.json").is_file():
        return True
    return (root / "checkpoints").is_dir() and any(
        (root / name).is_file() for name in ("config.yaml", "metrics.csv")
    )


def _same(out: Path, source: Path) -> bool:
    """The same file under any spelling: the path resolved, or a hard link to it."""
    try:
        if out.resolve() == source.resolve():
            return True
        return out.exists() and source.exists() and out.samefile(source)
    except OSError:
        return False
