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
from trainwell.outputs import check_output


def check_destination(out: Path, checkpoint: Path | None = None, flag: str = "--out") -> None:
    """Refuse, before any work, a destination that cannot or must not be written: the
    shared check of every verb's output (:func:`trainwell.outputs.check_output`), with
    the checkpoint being read as the input; an export may go beside it in checkpoints/.

    Example:
        >>> check_destination(Path("/no/such/folder/model.onnx"))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: export: --out /no/such/folder/model.onnx: the folder ...
    """
    check_output(out, flag, verb="export", inputs=[(checkpoint, "the checkpoint being exported")],
                 beside_checkpoints=True)  # fmt: skip


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
