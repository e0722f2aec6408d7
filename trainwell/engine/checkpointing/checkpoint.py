"""Checkpoints: a dict of state, written atomically and durably, loaded without pickled code.

A checkpoint holds only tensors and plain containers, so it loads with
``torch.load(path, weights_only=True)``: nothing in it can run code.

Writes go to a temporary file in the same folder, are flushed and fsync'ed, then renamed
onto the final name with ``os.replace`` (atomic on POSIX), and the folder is fsync'ed so
the rename itself survives a power cut. A crash at any instant leaves either the old
file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import re
import shutil
import stat
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainwell._options import check_int, option
from trainwell.errors import UserError

# step-N.pt files, and step-N/ folders of sharded checkpoints (dist.strategy=fsdp).
STEP_FILE = re.compile(r"^step-(\d+)(\.pt)?$")


@dataclass
class CheckpointConfig:
    """When to write checkpoints, and how many to keep."""

    every_steps: int = option(0, "also write step-N.pt every this many optimizer steps (0: off)")
    keep_last: int = option(3, "how many step-N.pt to keep (last.pt and best.pt are always kept)")

    def __post_init__(self) -> None:
        check_int(self.every_steps, "checkpoint.every_steps", low=0)
        check_int(self.keep_last, "checkpoint.keep_last", low=1)


def save_atomic(state: dict[str, Any], path: str | Path, *, sync_dir: bool = True) -> None:
    """Write ``state`` to ``path`` so that a crash never leaves a partial file there.

    An error while writing (a full disk, no permission) removes the temporary file,
    leaves any previous ``path`` untouched, and raises an ``OSError`` naming the path.
    ``sync_dir=False`` leaves the folder's fsync to the caller (one for several files).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "last.pt"
        >>> save_atomic({"model": {}, "step": torch.tensor(3)}, p)
        >>> int(load_checkpoint(p)["step"])
        3
    """
    # torch.save takes any object with write() and flush(); its stub says IO[bytes].
    _write_atomic(Path(path), lambda out: torch.save(state, out), sync_dir)  # type: ignore[arg-type]


def save_copies(state: dict[str, Any], paths: list[Path]) -> None:
    """Write ``state`` to each of ``paths`` (``best.pt`` and ``last.pt`` at an epoch's end),
    each atomically: serialized once, into the first; the others are byte copies of it.

    Pickling is about half of writing a small checkpoint (0.9 of 1.8 ms for the digits
    MLP's, measured); copying the file just written, still in the page cache, costs a
    fraction of it (3.7 -> 2.5 ms for both files). The folder is fsync'ed once, after the
    last rename.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> save_copies({"model": {}, "step": 7}, [d / "best.pt", d / "last.pt"])
        >>> (d / "best.pt").read_bytes() == (d / "last.pt").read_bytes()
        True
    """
    if not paths:
        return
    first, *others = paths
    save_atomic(state, first, sync_dir=not others)
    for i, path in enumerate(others):
        _write_atomic(path, functools.partial(_copy_file, first), sync_dir=i == len(others) - 1)


def _copy_file(src: Path, out: EarlyWriteback) -> None:
    with open(src, "rb") as f:
        # Reads of the file's size (up to 8 MB): no buffer larger than the file.
        size = os.fstat(f.fileno()).st_size
        shutil.copyfileobj(f, out, max(1, min(size, EarlyWriteback.CHUNK)))


def _write_atomic(path: Path, write: Callable[[EarlyWriteback], object], sync_dir: bool) -> None:
    """``write(out)`` into a temporary file beside ``path``, fsync'ed, then renamed onto it."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, f"could not write checkpoint {path}: {exc.strerror}") from exc
    writer = None
    try:
        # mkstemp creates the file private (0600); give it the mode any new file gets.
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            writer = EarlyWriteback(f)
            write(writer)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        # torch.save reports a failed write (a full disk) as its own RuntimeError
        # ("unexpected pos"): the OSError the file raised says what really happened.
        cause = writer.error if writer is not None and writer.error is not None else exc
        if isinstance(cause, OSError):
            message = f"could not write checkpoint {path}: {cause.strerror or cause}"
            raise OSError(cause.errno, message) from exc
        raise
    if sync_dir:
        fsync_dir(path.parent)


class EarlyWriteback:
    """A file wrapper that hands written data to the disk while torch.save still runs.

    Without it, all of a large checkpoint reaches the disk during the final fsync, after
    serialization: the two run one after the other. Every few MB this asks the kernel to
    start writing what is there (``POSIX_FADV_DONTNEED`` starts writeback of dirty pages
    and drops them once clean), so disk and CPU work overlap. The final fsync still
    waits for every byte: durability is unchanged. Measured by benchmarks/checkpoint.py.

    Example:
        >>> with tempfile.TemporaryFile() as f:
        ...     torch.save({"step": torch.tensor(3)}, EarlyWriteback(f))
        ...     _ = f.seek(0)
        ...     int(torch.load(f)["step"])
        3
    """

    CHUNK = 8 << 20

    def __init__(self, f: Any) -> None:
        self.f = f
        self.start = 0
        self.pending = 0
        self.enabled = hasattr(os, "posix_fadvise")  # not on macOS or Windows
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            n = self.f.write(data)
        except OSError as exc:
            self.error = exc  # kept: torch turns it into a RuntimeError of its own
            raise
        self.pending += n
        if self.enabled and self.pending >= self.CHUNK:
            self.f.flush()
            end = self.start + self.pending
            os.posix_fadvise(self.f.fileno(), self.start, self.pending, os.POSIX_FADV_DONTNEED)
            self.start, self.pending = end, 0
        return n

    def flush(self) -> None:
        self.f.flush()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (skipped where a folder cannot be opened)."""
    # Not every platform lets a folder be opened (Windows).
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``, turning every failure into one line.

    Raises :class:`UserError` naming the file for a missing, empty, truncated or garbage
    file, and for a file that carries pickled code (which is refused, never executed).
    A file that cannot be read (no permission, a disk error) raises :class:`Unreadable`:
    it may be whole, so nothing may treat it as torn (and write over it).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "last.pt"
        >>> save_atomic({"model": {}, "step": 1}, p)
        >>> sorted(load_checkpoint(p))
        ['model', 'step']
    """
    path = Path(path)
    state = _torch_load(path, _size(path))
    if not isinstance(state, dict) or "model" not in state:
        raise UserError(f"checkpoint {path} is not a trainwell checkpoint (no 'model' state)")
    check_format(path, state)
    return state


def _size(path: Path) -> int:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise UserError(f"checkpoint {path} does not exist") from None
    except OSError as exc:
        raise read_error(path, exc) from None
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"checkpoint {path} does not exist (not a file)")
    if info.st_size == 0:
        raise UserError(f"checkpoint {path} is empty (0 bytes): it was never fully written")
    return info.st_size


def _torch_load(path: Path, size: int) -> Any:
    try:
        with warnings.catch_warnings():
            # torch's note on a foreign pickle protocol says nothing the error below does not.
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:  # removed meanwhile (rotation by another run)
        raise UserError(f"checkpoint {path} does not exist") from None
    except OSError as exc:
        # torch lets the file's own OSError through (EACCES, EIO: the bytes were never seen,
        # and may be whole), but also raises one for a file cut short (EINVAL, a seek past
        # its end). Reading it plainly tells the two apart.
        if _reads_plainly(path):
            raise _unusable(path, size, exc) from None
        raise read_error(path, exc) from None
    except pickle.UnpicklingError as exc:
        # torch names weights_only in every safe-loader failure; only "Unsupported global"
        # means the file really asks to build Python objects (code could run).
        if "Unsupported global" in str(exc) or "GLOBAL" in str(exc):
            raise UserError(
                f"checkpoint {path} holds pickled Python objects, not only tensors; refusing "
                "to load it (it could run code). Re-save it as tensors and plain containers"
            ) from None
        # Never repeat torch's advice to retry with weights_only=False: that runs the file.
        raise UserError(
            f"checkpoint {path} is corrupt or not a trainwell checkpoint: not a file torch.save "
            f"wrote, or damaged ({_unpickler_detail(exc)})"
        ) from None
    except Exception as exc:
        # Truncated zips, garbage bytes and broken pickles surface as many exception
        # types (RuntimeError, EOFError, IndexError, KeyError, ...); all mean "unusable".
        raise _unusable(path, size, exc) from None


class Unskippable(UserError):
    """A checkpoint that may well be whole but cannot be used now. ``--resume auto`` stops
    on it instead of skipping it: going past it would resume an older state, or start
    from scratch, over it."""


class Unreadable(Unskippable):
    """A checkpoint (or its folder) that the operating system would not let be read:
    EACCES, EIO, ... The message names the file and the errno."""


class TooNew(Unskippable):
    """A checkpoint in a format newer than this trainwell reads."""


def read_error(path: Path, exc: OSError, what: str = "checkpoint") -> Unreadable:
    """One line for a checkpoint (or ``what``) that could not be read, naming the file (the
    one the OS named, where it did) and the errno.

    Example:
        >>> import errno
        >>> denied = PermissionError(errno.EACCES, "Permission denied")
        >>> str(read_error(Path("R/last.pt"), denied)).split(" (")[0]
        'cannot read checkpoint R/last.pt: [Errno 13] Permission denied'
    """
    where = path
    if isinstance(exc.filename, (str, os.PathLike)):
        named = Path(exc.filename)
        where = path if os.path.abspath(named) == os.path.abspath(path) else named
    reason = f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else str(exc) or type(exc).__name__
    return Unreadable(
        f"cannot read {what} {where}: {reason} (nothing was changed; fix its permissions or "
        "its disk, then try again)"
    )


# The layout of what a checkpoint holds. A trainwell that changes it in a way older code
# cannot follow raises this number; older code refuses such files instead of misreading them.
# Files from before the field hold format 1.
FORMAT = 1


def check_format(path: Path, state: dict[str, Any]) -> None:
    """Refuse a checkpoint written in a format this trainwell cannot read."""
    fmt = state.get("format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int):
        raise UserError(f"checkpoint {path} is malformed: 'format' is {fmt!r}, not an integer")
    if fmt > FORMAT:
        written = (state.get("versions") or {}).get("trainwell", "a newer trainwell")
        raise TooNew(
            f"checkpoint {path} is in checkpoint format {fmt} (written by trainwell {written}); "
            f"this trainwell reads format {FORMAT} and older: upgrade trainwell to use it"
        )


def _unusable(path: Path, size: int, exc: BaseException) -> UserError:
    return UserError(
        f"checkpoint {path} is truncated or not a checkpoint ({size} bytes; "
        f"{type(exc).__name__}: {_first_line(exc)})"
    )


def _reads_plainly(path: Path) -> bool:
    """Whether every byte of ``path`` reads (after torch.load failed with an OSError)."""
    try:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    except OSError:
        return False
    return True


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    # torch's messages run on with advice; the first sentence says what failed.
    return text[0].split(". ")[0] if text else type(exc).__name__


def _unpickler_detail(exc: BaseException) -> str:
    _, _, after = str(exc).partition("WeightsUnpickler error:")
    lines = [line.strip() for line in after.splitlines() if line.strip()]
    return lines[0] if lines else "unreadable pickle data"


def rotate(folder: Path, keep_last: int) -> None:
    """Delete the oldest ``step-N.pt`` (or ``step-N/``) beyond ``keep_last``; never
    touches last/best."""
    steps = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := STEP_FILE.match(p.name)))
    for _, p in steps[: max(0, len(steps) - keep_last)]:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
            continue
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
