"""Keep the file:line references of the repository's map true as the code moves.

ARCHITECTURE.md, CONTRIBUTING.md and tests/README.md point into the code as
```` `path.py:LINE` (`Symbol`) ````: a path relative to the repository, a line, and the
symbol defined there (``Trainer.train_step`` for a method, ``_tensor_backward.tensor_backward``
for a nested function, ``EVENTS`` for a module-level name). The symbol is the truth; the
line is derived from it with ``ast``: the ``def``/``class`` line (not a decorator's), or the
first line of the assignment. Run this after moving code::

    python scripts/update_architecture.py           # rewrite the lines in place
    python scripts/update_architecture.py --check   # exit 1 if any line is stale

A reference whose file or symbol no longer exists cannot be fixed by a line number: it is
printed, the file is left as it is, and the exit code is 1 (edit the reference by hand).
``tests/project/test_architecture_doc.py`` runs ``--check``'s logic.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = ("ARCHITECTURE.md", "CONTRIBUTING.md", "tests/README.md")
# `trainwell/engine/loop/trainer.py:143` (`Trainer.train_step`)
# (the two halves may stand on two lines of a wrapped paragraph)
REFERENCE = re.compile(
    r"`(?P<path>[\w./-]+\.py):(?P<line>\d+)`(?P<gap>\s+)\(`(?P<symbol>[A-Za-z_][\w.]*)`\)"
)
# Any `path.py:LINE` in backticks: each must be a REFERENCE, or nothing keeps it true.
BARE = re.compile(r"`[\w./-]+\.py:\d+`")


@dataclass(frozen=True)
class Problem:
    """A reference that is wrong: ``line`` is the right line, or ``None`` when the file or
    the symbol does not exist (nothing to rewrite it to)."""

    doc: str
    path: str
    symbol: str
    written: int
    line: int | None
    reason: str = ""

    def __str__(self) -> str:
        if not self.symbol:
            return f"{self.doc}: `{self.path}`: {self.reason}; write it as `path:LINE` (`Symbol`)"
        where = f"{self.doc}: `{self.path}:{self.written}` (`{self.symbol}`)"
        if self.line is None:
            return f"{where}: {self.reason}; fix the reference by hand"
        return f"{where}: now at line {self.line}"


def symbols(source: str) -> dict[str, int]:
    """Every def, class and module-level name of ``source``, by dotted name, with its line.

    Example:
        >>> table = symbols("X = 1\\nclass A:\\n    @staticmethod\\n    def f():\\n        pass\\n")
        >>> table["X"], table["A"], table["A.f"]
        (1, 2, 4)
    """
    table: dict[str, int] = {}

    def visit(body: list[ast.stmt], prefix: str, top: bool) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + node.name
                table.setdefault(name, node.lineno)  # the first definition, as Python reads
                visit(node.body, name + ".", False)
            elif top and isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        table.setdefault(target.id, node.lineno)

    visit(ast.parse(source).body, "", True)
    return table


def problems(doc: str, text: str, root: Path = REPO) -> list[Problem]:
    """The references of ``text`` (the document ``doc``) that are stale or dangling."""
    found = [
        Problem(doc, m[0].strip("`"), "", 0, None, "a file:line with no (`Symbol`) after it")
        for m in BARE.finditer(text)
        if not REFERENCE.match(text, m.start())
    ]
    tables: dict[str, dict[str, int] | None] = {}
    for m in REFERENCE.finditer(text):
        path, symbol, written = m["path"], m["symbol"], int(m["line"])
        if path not in tables:
            file = root / path
            tables[path] = symbols(file.read_text()) if file.is_file() else None
        table = tables[path]
        if table is None:
            found.append(Problem(doc, path, symbol, written, None, f"{path} does not exist"))
        elif symbol not in table:
            found.append(Problem(doc, path, symbol, written, None, f"{path} defines no {symbol}"))
        elif table[symbol] != written:
            found.append(Problem(doc, path, symbol, written, table[symbol]))
    return found


def rewritten(doc: str, text: str, root: Path = REPO) -> str:
    """``text`` with every stale line number replaced by its symbol's current line."""
    fixes = {(p.path, p.symbol): p.line for p in problems(doc, text, root) if p.line is not None}

    def fix(m: re.Match[str]) -> str:
        line = fixes.get((m["path"], m["symbol"]))
        if line is None:
            return m[0]
        return f"`{m['path']}:{line}`{m['gap']}(`{m['symbol']}`)"

    return REFERENCE.sub(fix, text)


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check`` only report) the references of every document."""
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    code = 0
    for doc in DOCS:
        path = REPO / doc
        if not path.exists():
            continue
        text = path.read_text()
        for problem in problems(doc, text):
            if check or problem.line is None:
                print(problem)
                code = 1
        if not check:
            new = rewritten(doc, text)
            if new != text:
                path.write_text(new)
                print(f"updated {path}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
