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
from typing import Any

from trainwell.doctor.findings import Finding, render
from trainwell.doctor.frame import Doctor


@contextmanager
def watch(
    model: Any = None, optimizer: Any = None, max_steps: int | None = None
) -> Iterator[Doctor]:
    """Watch the training inside the ``with`` block; read ``doc.findings`` afterwards.

    ``model`` and ``optimizer`` are optional: the doctor finds them by itself, but a
    model given here is watched from the first step (its attributes are scanned even
    before it runs a forward). ``doc.report()`` gives the report as text.
    """
    doc = Doctor(max_steps=max_steps)
    if model is not None:
        doc.watch_model(model)
    with doc:
        yield doc


__all__ = ["Doctor", "Finding", "render", "watch"]
