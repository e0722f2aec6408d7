"""The ``trainwell`` command line: a thin layer over the library.

Every verb is a module of :mod:`trainwell.commands` with ``register(sub)``; ``COMMANDS``
lists them. Errors from bad input print one line and exit with code 2; ``--debug`` shows
the traceback. Interrupted training exits with 128 + the signal number; a failed overfit
check (``doctor.overfit_batch=true``) with 1.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

from trainwell.commands.common import run

# The modules of trainwell.commands, in the order of their verbs in `trainwell --help`.
# Each is imported for the parser (no torch at the top of any); its handler's imports
# load only when that verb runs.
COMMANDS: tuple[str, ...] = (
    "train",  # train
    "lr_find",  # lr-find
    "doctor",  # doctor
    "env",  # env
    "data",  # data
    "bench_data",  # bench-data
    "batch_size",  # batch-size
    "profile",  # profile
    "deploy",  # new, export, predict
    "report",  # report, runs
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainwell",
        description="Train PyTorch models the way seasoned engineers do.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"trainwell.commands.{name}").register(sub)
    from trainwell.trust import add_safe_flags

    add_safe_flags(sub)
    return parser


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the line; ``KEY=VALUE`` overrides may stand anywhere, flags included between.

    argparse takes one run of positionals, so overrides after a flag come back unknown:
    they join the others here, and anything else unknown is refused as usual.
    """
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    overrides = [a for a in extra if "=" in a and not a.startswith("-")]
    if overrides and hasattr(args, "overrides"):
        args.overrides = [*args.overrides, *overrides]
        extra = [a for a in extra if a not in overrides]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainwell`` console script; returns the exit code."""
    return run(_dispatch, _parse(argv))


def _dispatch(args: argparse.Namespace) -> int:
    """Run the verb: the handler its module of :mod:`trainwell.commands` set."""
    from trainwell.trust import apply_args

    apply_args(args)  # --safe: before any config is read
    handler = getattr(args, "handler", None)
    if handler is None:  # no verb: what there is to choose from
        _parser().print_help()
        return 2
    return handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
