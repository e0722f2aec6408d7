"""Where the documentation's examples live: README.md (its first screen and tour) and the
pages of ``docs/`` (the rest, by topic). The tests that run the examples as written read
them through here, so an example found once in all of it is the one they run, whichever
page holds it.

Example:
    >>> "## Stop, crash, resume" in page("engine/stop-crash-resume.md")
    False
    >>> page("engine/stop-crash-resume.md").startswith("# Stop, crash, resume")
    True
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def pages() -> list[Path]:
    """README.md, then every Markdown page of docs/ in path order."""
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def docs_text() -> str:
    """README.md and every docs page, one after the other (blank lines between)."""
    return "\n\n".join(p.read_text() for p in pages())


def page(relative: str) -> str:
    """The text of ``docs/<relative>``."""
    return (DOCS / relative).read_text()


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of ``text``: (language, body)."""
    return re.findall(r"```(\w+)\n(.*?)```", text, flags=re.S)
