"""Text from files and folder names made safe to print to a terminal.

A run folder's name, a run name in ``summary.json`` or a path in an error message can
hold ESC, CSI or BEL bytes: printed as they are, they recolour, retitle or clear the
user's terminal, or hide what is written. Such characters are shown escaped instead.

Example:
    >>> printable("run\\x1b[2J\\x07-1")
    'run\\\\x1b[2J\\\\x07-1'
    >>> printable(b"bad\\x9b".decode("utf-8", "surrogateescape"))
    'bad\\\\x9b'
    >>> printable("ok name")
    'ok name'
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls (0x9b is a one-byte CSI), and the Unicode marks that
# reorder or hide text (bidirectional overrides and isolates, zero-width joiners aside).
# Bytes of a name that are not UTF-8 arrive as lone surrogates (U+DC80-U+DCFF, Python's
# surrogateescape); printed back they would be those raw bytes again (0x9b among them).
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\udc80-\udcff]"
)


def printable(text: object, keep: str = "") -> str:
    """``str(text)`` with every control character written as ``\\xNN`` / ``\\uNNNN``;
    the characters in ``keep`` (say ``"\\n"``) stay as they are."""

    def escape(match: re.Match[str]) -> str:
        char = match.group()
        if char in keep:
            return char
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            return f"\\x{code - 0xDC00:02x}"  # the byte it stands for
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _CONTROL.sub(escape, str(text))
