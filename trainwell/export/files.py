"""Writing an export or a predictions file: under a temporary name beside the destination,
renamed onto it only once it is complete and checked.

A crash, a failed parity check or bad input therefore never leaves a file at the
destination that looks finished but is not.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from trainwell.errors import UserError

# Files an export must never replace: they hold training state, not exported weights.
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")


def check_destination(out: Path, checkpoint: Path | None = None, flag: str = "--out") -> None:
    """Refuse, before any work, a destination that cannot or must not be written.

    Refused: the checkpoint being read (under any spelling: a symlink, a hard link), any
    other existing checkpoint, a folder, and a path whose folder does not exist.

    Example:
        >>> check_destination(Path("/no/such/folder/model.onnx"))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: cannot write /no/such/folder/model.onnx: the folder ...
    """
    if checkpoint is not None:
        _refuse_checkpoint(out, checkpoint, flag)
    if out.is_dir():
        raise UserError(f"{flag} {out} is a folder; give the file to write")
    if not out.parent.is_dir():
        raise UserError(f"cannot write {out}: the folder {out.parent} does not exist")


def _refuse_checkpoint(out: Path, checkpoint: Path, flag: str) -> None:
    same = out.resolve() == checkpoint.resolve()
    if not same and out.exists():
        try:
            same = out.samefile(checkpoint)  # a hard link to the checkpoint
        except OSError:
            same = False
    if same:
        raise UserError(
            f"export: {flag} {out} is the checkpoint being exported; choose another path"
        )
    if out.is_file() and out.suffix in CHECKPOINT_SUFFIXES:
        raise UserError(
            f"export: {flag} {out} would replace an existing checkpoint; choose another path"
        )


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A fresh temporary path beside ``out``, renamed onto ``out`` when the block ends
    without an exception; removed in every other case.

    Example:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp()) / "preds.csv"
        >>> with staged(out) as tmp:
        ...     _ = tmp.write_text("index,prediction\\n")
        >>> out.read_text()
        'index,prediction\\n'
    """
    # mkstemp: a unique name in the destination's folder, so the rename is atomic and two
    # writers at once never share a temporary file.
    try:
        fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        # mkstemp makes the file private (0600); an export is for sharing: the mode any
        # new file gets under the user's umask.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, out)
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)  # gone already after the rename


def _umask() -> int:
    # The umask can only be read by setting it; set it straight back.
    mask = os.umask(0)
    os.umask(mask)
    return mask
