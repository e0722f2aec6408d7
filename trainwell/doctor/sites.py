"""Places in the user's code: which files are the user's, the user's frame on the
stack, and a file's syntax tree. The bottom layer of the doctor: it imports nothing of
the package."""

from __future__ import annotations

import ast
import functools
import os
import sys
import sysconfig
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@functools.lru_cache(maxsize=64)
def parse(file: str) -> ast.Module | None:
    """The file's syntax tree (cached), or ``None`` when it cannot be read."""
    try:
        with open(file) as f:
            return ast.parse(f.read(), file)
    except (OSError, SyntaxError, ValueError):
        return None


# The package's own folder from this file (importing ``trainwell`` here would be a
# cycle), torch's, the standard library, installed packages and the environment's
# scripts (the ``trainwell`` launcher in ``.venv/bin`` is not the user's code).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple(
    p + os.sep
    for p in {
        _PACKAGE_DIR,
        os.path.dirname(torch.__file__),
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        sysconfig.get_paths()["scripts"],
        os.path.join(sys.prefix, "bin"),
    }
)


@functools.lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """Code the user wrote: not torch, not trainwell, not the standard library or
    installed packages (the doctor never points into those)."""
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    return not path.startswith(_LIBRARY_DIRS)


def site_of_caller(skip: int) -> Site | None:
    """The user's line that called the function ``skip`` frames up."""
    return Site.of(user_frame(start=sys._getframe(skip + 1)))


def made_at(skip: int) -> Site | None:
    """Where an object was made, for the user: the line that calls a factory of theirs
    (``optimizer = make_optimizer(model)``) rather than the factory's ``return``."""
    frame = user_frame(start=sys._getframe(skip + 1))
    while frame is not None and frame.f_back is not None and _is_return(frame):
        outer = user_frame(start=frame.f_back)
        if outer is None:
            break
        frame = outer
    return Site.of(frame)


def _is_return(frame: types.FrameType) -> bool:
    tree = parse(frame.f_code.co_filename)
    if tree is None:
        return False
    line = frame.f_lineno
    return any(isinstance(n, ast.Return) and n.lineno <= line <= (n.end_lineno or n.lineno)
               for n in ast.walk(tree))  # fmt: skip


def here() -> Site | None:
    """The innermost line of user code on the stack now (a probe asks from an event)."""
    return Site.of(user_frame(start=sys._getframe(1)))


def line_of(code: types.CodeType, lasti: int) -> int:
    """The line of the instruction at byte offset ``lasti`` of ``code`` (what a frame's
    ``f_lineno`` says while it runs that instruction), looked up only when asked.

    Example:
        >>> import sys
        >>> f = sys._getframe(); line_of(f.f_code, f.f_lasti) == f.f_lineno
        True
    """
    for start, end, line in code.co_lines():
        if start <= lasti < end and line is not None:
            return line
    return code.co_firstlineno


def user_frame(skip: int = 1, start: types.FrameType | None = None) -> types.FrameType | None:
    """The innermost frame of user code on the current stack (or from ``start`` out)."""
    frame: types.FrameType | None = start or sys._getframe(skip)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def variable_name(obj: object, frame: types.FrameType | None, depth: int = 4) -> str | None:
    """The name the user's code holds ``obj`` by (``net``, ``self.model``), looked up in
    the locals and globals of ``frame`` and a few frames out."""
    while frame is not None and depth > 0:
        if is_user_file(frame.f_code.co_filename):
            found = _name_in(obj, frame.f_locals) or _name_in(obj, frame.f_globals)
            if found is not None:
                return found
            depth -= 1
        frame = frame.f_back
    return None


def _name_in(obj: object, namespace: dict) -> str | None:
    for name, value in list(namespace.items()):
        if value is obj and not name.startswith("_"):
            return name
    owner = namespace.get("self")
    if owner is not None:
        for name, value in list(getattr(owner, "__dict__", {}).get("_modules", {}).items()):
            if value is obj:
                return f"self.{name}"
    return None


class LazySite:
    """Where an event happened, found only when a probe asks: walking the stack on every
    event would cost more than most probes' work. (Events made at every step set
    ``_frame`` themselves: one call less per event.)"""

    _site: Site | None = None
    _key: tuple[Any, int] | None = None  # kept when the frame is let go

    def __init__(self, frame: types.FrameType) -> None:
        self._frame: types.FrameType | None = frame

    @property
    def key(self) -> tuple[Any, int] | None:
        """A cheap stand-in for the site, to tell call sites apart without a stack walk:
        the calling instruction, as (id of its code, its offset). Not the code object
        (hashing one hashes its constants, at every event) nor the line number (computed
        from the code's line table)."""
        frame = self._frame
        return self._key if frame is None else (id(frame.f_code), frame.f_lasti)

    def pin(self) -> Any:
        """The site as it is now, resolved only when called: the line is read now (a
        frame's line moves on), the file lookup and the walk out of library code wait,
        unless the direct caller is library code."""
        frame = self._frame
        if frame is not None and self._site is None:
            code, line = frame.f_code, frame.f_lineno
            if is_user_file(code.co_filename):
                return lambda: Site(code.co_filename, line)
        site = self.site
        return lambda: site

    @property
    def site(self) -> Site | None:
        if self._frame is not None:
            self._key = self.key
            self._site = Site.of(user_frame(start=self._frame))
            self._frame = None  # let the frames go
        return self._site

    @property
    def frame(self) -> types.FrameType | None:
        return user_frame(start=self._frame) if self._frame is not None else None


@dataclass
class Site:
    """A place in the user's code."""

    file: str
    line: int

    @classmethod
    def of(cls, frame: types.FrameType | None) -> Site | None:
        if frame is None:
            return None
        return cls(frame.f_code.co_filename, frame.f_lineno)


def variable_site(
    frame: types.FrameType | None,
    holds: Callable[[Any], bool],
    assigned: Callable[[str, str], int | None],
) -> Site | None:
    """Where the user's variable that holds a value ``holds`` accepts was assigned: the
    frames from ``frame`` outward, in the user's files only, locals before globals;
    ``assigned(file, name)`` picks the assignment's line (None: look further out)."""
    f = frame
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            for scope in (f.f_locals, f.f_globals):
                name = next((n for n, v in list(scope.items()) if holds(v)), None)
                line = assigned(f.f_code.co_filename, name) if name else None
                if line is not None:
                    return Site(f.f_code.co_filename, line)
        f = f.f_back
    return None
