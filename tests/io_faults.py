"""Test-only I/O faults: make chosen paths fail as an unreadable file, a folder at mode
000, a read-only folder or a failing disk would, even for root (whose ``chmod 000``
blocks nothing, so the tests cannot make real ones).

``install(rules)`` patches this process; ``env(rules)`` is the environment that makes a
subprocess (``python -m trainwell ...``) install them at start-up, through
``tests/faultshim/sitecustomize.py``. A rule is ``{"path": GLOB, "kind": KIND}``:

- ``deny-file``: opening a matching file (any mode) fails with EACCES;
- ``deny-dir``: listing a matching folder, and opening or stat'ing anything in it, fails
  with EACCES (a folder at mode 000: the folder itself still stats);
- ``readonly-dir``: creating, writing, renaming or removing anything in a matching
  folder fails with EACCES; reading works;
- ``eio``: reading a matching file past byte ``after`` (default 0) fails with EIO.
"""

from __future__ import annotations

import builtins
import errno
import fnmatch
import io
import json
import os
from pathlib import Path
from typing import Any

VAR = "TRAINWELL_TEST_IO_FAULTS"
SHIM = Path(__file__).resolve().parent / "faultshim"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def env(rules: list[dict[str, Any]], base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a subprocess that runs with ``rules`` in force."""
    base = dict(os.environ if base is None else base)
    path = [str(SHIM), *filter(None, base.get("PYTHONPATH", "").split(os.pathsep))]
    return {**base, VAR: json.dumps(rules), "PYTHONPATH": os.pathsep.join(path)}


def _norm(path: Any) -> str | None:
    if isinstance(path, int):
        return None  # a file descriptor
    try:
        return os.path.abspath(os.fsdecode(path))
    except TypeError:
        return None


def _pattern(path: str) -> str:
    return path if path.startswith(("*", "/")) else os.path.abspath(path)


def _fail(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


class _Faults:
    def __init__(self, rules: list[dict[str, Any]]) -> None:
        # A relative path is the working directory's; a pattern may start with "*".
        self.rules = [{**r, "path": _pattern(r["path"])} for r in rules]

    def _match(self, kind: str, path: str | None, inside: bool) -> dict[str, Any] | None:
        if path is None:
            return None
        target = os.path.dirname(path) if inside else path
        for rule in self.rules:
            if rule["kind"] == kind and fnmatch.fnmatch(target, rule["path"]):
                return rule
        return None

    def opening(self, path: str | None, writing: bool) -> None:
        if self._match("deny-file", path, False) or self._match("deny-dir", path, True):
            raise _fail(errno.EACCES, path or "")
        if writing and self._match("readonly-dir", path, True):
            raise _fail(errno.EACCES, path or "")

    def changing(self, *paths: Any) -> None:
        for raw in paths:
            path = _norm(raw)
            if self._match("readonly-dir", path, True) or self._match("deny-dir", path, True):
                raise _fail(errno.EACCES, path or "")

    def listing(self, path: str | None) -> None:
        if self._match("deny-dir", path, False):
            raise _fail(errno.EACCES, path or "")

    def statting(self, path: str | None) -> None:
        if self._match("deny-dir", path, True):
            raise _fail(errno.EACCES, path or "")

    def eio(self, path: str | None) -> int | None:
        rule = self._match("eio", path, False)
        return None if rule is None else int(rule.get("after", 0))


class _FlakyFile(io.FileIO):
    after = 0

    def _check(self) -> None:
        if self.tell() >= self.after:
            raise _fail(errno.EIO, self.name)

    def read(self, size: int = -1) -> bytes:
        self._check()
        return super().read(size)

    def readinto(self, buffer: Any) -> int:
        self._check()
        return super().readinto(buffer)

    def readall(self) -> bytes:
        self._check()
        return super().readall()


def install(rules: list[dict[str, Any]]) -> None:
    """Patch this process so that ``rules`` hold (tests undo it with monkeypatch, or the
    process ends)."""
    faults = _Faults(rules)
    real_open, real_os_open = builtins.open, os.open
    real_stat, real_listdir, real_scandir = os.stat, os.listdir, os.scandir

    def fake_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        path = _norm(file)
        faults.opening(path, any(c in mode for c in "wax+"))
        after = faults.eio(path)
        if after is not None and "r" in mode and "b" in mode:
            raw = _FlakyFile(file, "r")
            raw.after = after
            return io.BufferedReader(raw)
        return real_open(file, mode, *args, **kwargs)

    def fake_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        faults.opening(_norm(path), bool(flags & _WRITE_FLAGS))
        return real_os_open(path, flags, *args, **kwargs)

    def fake_stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        faults.statting(_norm(path))
        return real_stat(path, *args, **kwargs)

    def fake_listdir(path: Any = ".") -> Any:
        faults.listing(_norm(path))
        return real_listdir(path)

    def fake_scandir(path: Any = ".") -> Any:
        faults.listing(_norm(path))
        return real_scandir(path)

    builtins.open = io.open = fake_open
    os.open, os.stat, os.listdir, os.scandir = fake_os_open, fake_stat, fake_listdir, fake_scandir
    for name in ("mkdir", "unlink", "remove", "rmdir"):
        _guard(name, lambda call, path, *a, **k: (faults.changing(path), call(path, *a, **k))[1])
    for name in ("rename", "replace"):
        _guard(name, lambda call, a, b, *r, **k: (faults.changing(a, b), call(a, b, *r, **k))[1])


def _guard(name: str, wrapper: Any) -> None:
    real = getattr(os, name)
    setattr(os, name, lambda *args, **kwargs: wrapper(real, *args, **kwargs))


def install_from_env() -> None:
    """What the subprocess shim calls at start-up."""
    raw = os.environ.get(VAR)
    if raw:
        install(json.loads(raw))
