"""Command-line verbs that live outside ``cli.py``, one module per group of verbs.

Each module listed in ``MODULES`` has ``register(sub)``, which adds its sub-parsers to
the ``trainwell`` parser and sets ``handler=`` on each (a function taking the parsed
arguments and returning the exit code). ``cli.main`` calls the handler and turns
``UserError`` into one line and exit code 2, as for every verb. A module imports what is
heavy inside its handlers, so ``trainwell --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib

# Order is the order of the verbs in ``trainwell --help``.
MODULES: tuple[str, ...] = ("data", "bench_data", "batch_size", "profile", "deploy", "report")


def register_all(sub: argparse._SubParsersAction) -> None:
    """Add the verbs of every module in ``MODULES`` to ``sub``."""
    for name in MODULES:
        importlib.import_module(f"trainwell.commands.{name}").register(sub)
