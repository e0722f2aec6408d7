"""README and docs blocks that begin ``# from docs/PAGE.md`` (the summaries that moved from
the README to docs/engine/ and docs/distributed/) are excerpts of a docs page whose
examples a test runs as written: each such block must be, line for line, a run of
consecutive lines of one code block of that page."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO
from tests.docs_pages import docs_text

BLOCKS = re.findall(r"```(\w+)\n(.*?)```", docs_text(), flags=re.S)
EXCERPTS = [(lang, body) for lang, body in BLOCKS if body.startswith("# from docs/")]


def test_the_readme_has_excerpts():
    assert len(EXCERPTS) >= 3


@pytest.mark.parametrize("lang,body", EXCERPTS, ids=lambda v: v if "docs/" in v else None)
def test_excerpt_is_in_its_page(lang, body):
    first, *lines = body.splitlines()
    page = REPO / first.removeprefix("# from ").strip()
    assert page.exists(), first
    pages = [b.splitlines() for kind, b in re.findall(r"```(\w+)\n(.*?)```",
                                                       page.read_text(), flags=re.S)
             if kind == lang]  # fmt: skip
    n = len(lines)
    assert any(src[i : i + n] == lines for src in pages for i in range(len(src) - n + 1)), (
        f"README's excerpt of {page.name} is not in it as written:\n{body}")
