"""The doctor's report as text: one block per finding, then a summary line."""

from __future__ import annotations

from typing import Any

from trainwell.doctor.findings import render


def report_text(
    doc: Any, stopped: bool = False, children: str | None = None, child_steps: int = 0
) -> str:
    """The doctor's report: one block per finding, then a summary line. ``children``
    is the line on the child processes the script started (their steps, ``child_steps``,
    are counted in the total)."""
    head = f"trainwell doctor: {doc.steps + child_steps} optimizer steps watched"
    if children:
        head += f" ({doc.steps} in this process; {children})"
    if stopped:
        head += " (stopped at --max-steps)"
    if doc.errors:
        head += f" (probes switched off after an internal error: {'; '.join(doc.errors)})"
    if not doc.findings:
        return f"{head}; no findings"
    blocks = [render(f) for f in doc.findings]
    return "\n\n".join([f"{head}; {len(doc.findings)} finding(s)", *blocks])
