"""Rewrite the config reference page (docs/config.md) from the config dataclasses, and the
file:line references of ARCHITECTURE.md and its companions (scripts/update_architecture.py)."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

from trainwell.config import reference_markdown

PAGE = Path(__file__).resolve().parent.parent / "docs" / "config.md"
PATTERN = re.compile(
    r"(<!-- config-reference:start -->\n).*?(<!-- config-reference:end -->)", re.DOTALL
)


def rendered(text: str) -> str:
    """The page's text with the reference section regenerated."""
    return PATTERN.sub(lambda m: m.group(1) + reference_markdown() + m.group(2), text)


if __name__ == "__main__":
    PAGE.write_text(rendered(PAGE.read_text()))
    print(f"updated {PAGE}")
    # ARCHITECTURE.md's file:line references too (it exits with its own code).
    runpy.run_path(str(Path(__file__).with_name("update_architecture.py")), run_name="__main__")
