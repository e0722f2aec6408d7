"""A finding: the pitfall, the user's file and line, the evidence and the fix.

The JSON shape is the contract of DESIGN.md; :func:`render` prints one finding as a
short block, like a compiler diagnostic.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("error", "warning", "info")


@dataclass
class Finding:
    """One pitfall found in a training run.

    Example:
        >>> f = Finding("retain-graph", "warning", "train.py", 12, "why", "fix it")
        >>> f.to_dict()["line"]
        12
    """

    code: str
    severity: str
    file: str
    line: int
    message: str
    fix: str
    related: list[dict[str, Any]] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    why: str = ""

    @property
    def key(self) -> tuple[str, str, int]:
        """Findings are reported once per (code, file, line)."""
        return (self.code, self.file, self.line)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("why")
        return data


def render(finding: Finding) -> str:
    """A finding as a short readable block.

    Example:
        >>> print(render(Finding("retain-graph", "warning", "t.py", 3, "what", "fix")))
        warning[retain-graph] t.py:3
          what
          fix: fix
    """
    lines = [f"{finding.severity}[{finding.code}] {finding.file}:{finding.line}"]
    lines.append(f"  {finding.message}")
    if finding.why:
        lines.append(f"  why it matters: {finding.why}")
    for rel in finding.related:
        what = f" ({rel['what']})" if rel.get("what") else ""
        lines.append(f"  related: {rel['file']}:{rel['line']}{what}")
    lines.append(f"  fix: {finding.fix}")
    return "\n".join(lines)


def to_json(findings: list[Finding], **extra: Any) -> str:
    """``{"findings": [...], ...}`` as DESIGN.md fixes it."""
    return json.dumps({"findings": [f.to_dict() for f in findings], **extra}, indent=2) + "\n"
