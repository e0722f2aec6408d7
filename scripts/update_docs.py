"""Rewrite the config reference page (docs/config.md) from the config dataclasses."""

from __future__ import annotations

import re
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
