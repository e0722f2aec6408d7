"""Is a sharded checkpoint folder whole? Checked before any of it is loaded.

A DCP folder is ``.metadata`` (which tensor is where: file, offset, length) and the shard
files ``__R_0.distcp``, each a run of ``torch.save`` records (zip archives) one after the
other. A shard replaced by garbage, cut short, or taken from another checkpoint is found
here from the metadata, each record's zip directory and its small members (read whole:
their CRC is checked), without reading the tensors' bytes: cheap enough for every
candidate of ``--resume auto``, which then skips a damaged folder like a torn ``.pt``
file instead of stopping on it. A file the OS will not let be read is an I/O error,
never "damaged" (:class:`~trainwell.engine.checkpointing.checkpoint.Unreadable`).
"""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

from trainwell.engine.checkpointing import checkpoint as ckpt
from trainwell.errors import UserError

METADATA = ".metadata"
# Members up to this size are read whole (CRC-checked): data.pkl, version, byteorder.
_SMALL = 1 << 20


def read_metadata(folder: Path) -> Any:
    """DCP's metadata of ``folder``; :class:`UserError` if missing or garbage."""
    from torch.distributed.checkpoint import FileSystemReader

    path = folder / METADATA
    try:
        with open(path, "rb"):  # an unreadable file is an I/O error, not damage
            pass
        return FileSystemReader(str(folder)).read_metadata()
    except FileNotFoundError:
        raise UserError(f"checkpoint {folder} is damaged: its DCP metadata ({METADATA}) is "
                        "missing") from None  # fmt: skip
    except OSError as exc:
        raise ckpt.read_error(path, exc) from None
    except Exception as exc:
        raise UserError(f"checkpoint {folder} is damaged: its DCP metadata ({METADATA}) is "
                        f"unreadable ({_brief(exc)})") from None  # fmt: skip


def check_shards(folder: Path) -> None:
    """Raise :class:`UserError` naming the folder and the shard file if any shard is
    missing, shorter than its metadata says, or not the records the metadata describes."""
    metadata = read_metadata(folder)
    per_file: dict[str, list[Any]] = {}
    for info in (metadata.storage_data or {}).values():
        per_file.setdefault(info.relative_path, []).append(info)
    missing = sorted(name for name in per_file if not (folder / name).is_file())
    if missing:
        raise UserError(
            f"checkpoint {folder} is missing shard files ({', '.join(missing[:3])}); it cannot "
            "be loaded"
        )
    for name, items in sorted(per_file.items()):
        problem = _check_file(folder / name, sorted(items, key=lambda i: i.offset))
        if problem:
            raise UserError(f"checkpoint {folder} is damaged: shard {name} {problem}")


def _check_file(path: Path, items: list[Any]) -> str | None:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            end = max(i.offset + i.length for i in items)
            if end > size:
                return f"is cut short ({size} bytes; its metadata describes {end})"
            for info in items:
                if info.transform_descriptors:  # compressed or otherwise transformed
                    continue
                problem = _check_record(f, info.offset, info.length)
                if problem:
                    return f"{problem} at byte {info.offset}"
    except OSError as exc:
        raise ckpt.read_error(path, exc) from None
    return None


def _check_record(f: Any, offset: int, length: int) -> str | None:
    """Whether the bytes at ``offset`` are the ``torch.save`` record DCP wrote there."""
    try:
        with zipfile.ZipFile(_Slice(f, offset, length)) as record:
            infos = record.infolist()
            if not any(i.filename.endswith("data.pkl") for i in infos):
                return "holds a zip archive that is not a tensor record"
            for info in infos:
                if info.file_size <= _SMALL:
                    record.read(info)  # checks its CRC
                else:
                    record.open(info).close()  # checks its local header
    except OSError:
        raise
    except Exception as exc:  # BadZipFile, struct errors, a bad CRC, ...
        return f"is not what its metadata describes (garbage, or another file; {_brief(exc)})"
    return None


class _Slice(io.RawIOBase):
    """The ``length`` bytes of ``f`` from ``offset``, as a file of their own."""

    def __init__(self, f: Any, offset: int, length: int) -> None:
        self.f, self.base, self.length, self.pos = f, offset, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        start = {0: 0, 1: self.pos, 2: self.length}[whence]
        self.pos = max(0, min(self.length, start + pos))
        return self.pos

    def readinto(self, buffer: Any) -> int:
        n = max(0, min(len(buffer), self.length - self.pos))
        self.f.seek(self.base + self.pos)
        data = self.f.read(n)
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def root_cause(exc: BaseException) -> BaseException:
    """DCP wraps each rank's failure (CheckpointException): the first cause says what
    failed."""
    failures = getattr(exc, "failures", None)
    if failures:
        first = next(iter(failures.values()))
        return first[0] if isinstance(first, tuple) else first  # (exception, its traceback)
    return exc


def load_error(folder: Path, exc: BaseException) -> UserError:
    """One line for a DCP load that failed: unreadable, damaged, or another model's."""
    cause = root_cause(exc)
    if isinstance(cause, OSError):
        return ckpt.read_error(folder, cause)
    text = _brief(cause)
    if isinstance(cause, (pickle.UnpicklingError, EOFError, zipfile.BadZipFile)) or (
        "PytorchStreamReader" in text
    ):
        return UserError(f"checkpoint {folder} is damaged: {text}")
    return UserError(f"checkpoint {folder} does not fit this model: {text}")


def _brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:240]}"
