"""The doctor: watches training (the engine's or any hand-written loop) and names the
pitfalls it sees, with the file, the line and the fix.

Example:
    >>> import trainwell
    >>> with trainwell.doctor.watch() as doc:
    ...     pass  # a hand-written training loop
    >>> doc.findings
    []
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from trainwell.doctor.findings import Finding, render
from trainwell.doctor.frame import Doctor


@contextmanager
def watch(max_steps: int | None = None) -> Iterator[Doctor]:
    """Watch the training inside the ``with`` block; read ``doc.findings`` afterwards.

    ``doc.report()`` gives the report as text.
    """
    doc = Doctor(max_steps=max_steps)
    with doc:
        yield doc


__all__ = ["Doctor", "Finding", "render", "watch"]
