"""The field corpus's cases and how a doctor report is judged against them.

A case is a correct script (``ok_*.py``, where no warning or error is the right answer) or
a planted bug (an entry of ``_mutations.MUTATIONS`` applied to one). Both the test
(``tests/unit/doctor/test_doctor_field.py``) and the score (``benchmarks/doctor_field.py``)
use this.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from _mutations import MUTATIONS, Mutation

HERE = Path(__file__).resolve().parent
EXPECT = re.compile(r"#\s*expect(-related|-alt)?:\s*([a-z-]+)")
ARGS = re.compile(r"^#\s*doctor-args:\s*(.*)$", re.M)


@dataclass
class Case:
    name: str
    text: str
    crash: bool = False
    expected: set[tuple[str, int]] = field(default_factory=set)
    alternatives: set[tuple[str, int]] = field(default_factory=set)
    related: set[tuple[str, int]] = field(default_factory=set)

    @property
    def doctor_args(self) -> list[str]:
        found = ARGS.search(self.text)
        return shlex.split(found.group(1)) if found else []


def _expectations(case: Case) -> Case:
    for lineno, line in enumerate(case.text.splitlines(), start=1):
        for kind, code in EXPECT.findall(line):
            {"": case.expected, "-alt": case.alternatives, "-related": case.related}[kind].add(
                (code, lineno))
    return case


def apply(mutation: Mutation) -> str:
    text = (HERE / f"{mutation.base}.py").read_text()
    for old, new in mutation.edits:
        count = text.count(old)
        if count != 1:
            raise ValueError(f"{mutation.name}: {old!r} occurs {count} times in {mutation.base}")
        text = text.replace(old, new)
    return text


def cases() -> list[Case]:
    bases = sorted(HERE.glob("ok_*.py"))
    out = [_expectations(Case(p.stem, p.read_text())) for p in bases]
    out += [_expectations(Case(mu.name, apply(mu), mu.crash)) for mu in MUTATIONS]
    return out


def judge(case: Case, findings: list[dict]) -> list[str]:
    """What is wrong with a report for this case: [] when it is right."""
    loud = [f for f in findings if f["severity"] in ("warning", "error")]
    problems = []
    for code, line in sorted(case.expected):
        lines = {line} | {ln for c, ln in case.alternatives if c == code}
        hits = [f for f in loud if f["code"] == code]
        if not hits:
            problems.append(f"missed {code} (expected at line {line})")
        elif not any(f["line"] in lines for f in hits):
            problems.append(f"{code} at line {hits[0]['line']}, expected {sorted(lines)}")
    for code, line in sorted(case.related):
        hit = next((f for f in loud if f["code"] == code), None)
        if hit and line not in {r["line"] for r in hit.get("related", [])} | {hit["line"]}:
            problems.append(f"{code} does not relate line {line}")
    wanted = {code for code, _ in case.expected}
    for f in loud:
        if f["code"] not in wanted:
            problems.append(f"false alarm {f['severity']}[{f['code']}] at line {f['line']}")
    return problems
