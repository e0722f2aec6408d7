"""``trainwell env``: what this machine offers PyTorch (versions, devices, libraries), and
what is wrong with it; the checks are :mod:`trainwell.env`'s."""

from __future__ import annotations

import argparse
import sys

from trainwell.commands.common import Subparsers, add_debug


def register(sub: Subparsers) -> None:
    """Add the ``env`` verb."""
    env = sub.add_parser("env", help="what this machine offers PyTorch, and what is wrong")
    env.add_argument("--json", action="store_true", help="print JSON instead of a report")
    add_debug(env)
    env.set_defaults(handler=_env)


def _env(args: argparse.Namespace) -> int:
    from trainwell import env

    info = env.collect(check=True)
    if args.json:
        sys.stdout.write(env.to_json(info))
    else:
        env.render(info)
    return 0
