"""``trainwell lr-find``: the learning-rate range test, which suggests ``optim.lr``.

The run is built as ``trainwell train`` builds it; the test itself is
:func:`trainwell.engine.lr_find.lr_find`.
"""

from __future__ import annotations

import argparse

from trainwell.commands.common import (
    Subparsers,
    add_config,
    add_debug,
    add_overrides,
    load_config,
)


def register(sub: Subparsers) -> None:
    """Add the ``lr-find`` verb."""
    lr_find = sub.add_parser(
        "lr-find",
        help="learning-rate range test: suggests optim.lr for a config",
        description="Build the run as `trainwell train` would (same --config and KEY=VALUE "
        "overrides), train a few steps while the lr rises exponentially, and suggest the lr "
        "where the loss falls fastest. Writes lr_find.csv and lr_find.png; no checkpoint, "
        "and run.dir is never touched.",
    )
    add_config(lr_find)
    lr_find.add_argument(
        "--start-lr", type=float, default=1e-7, metavar="LR", help="first lr (default 1e-7)"
    )
    lr_find.add_argument(
        "--end-lr", type=float, default=10.0, metavar="LR", help="last lr (default 10)"
    )
    lr_find.add_argument(
        "--steps",
        type=int,
        default=100,
        metavar="N",
        help="optimizer steps from --start-lr to --end-lr (default 100); fewer if it diverges",
    )
    lr_find.add_argument(
        "--out",
        "--output",  # its first name; --out is every verb's name for where output goes
        dest="output",
        metavar="DIR",
        help="folder for lr_find.csv and lr_find.png (default: a new one under runs/)",
    )
    add_debug(lr_find)
    add_overrides(lr_find)
    lr_find.set_defaults(handler=_lr_find)


def _lr_find(args: argparse.Namespace) -> int:
    from trainwell.engine.tools.lr_find import lr_find
    from trainwell.outputs import check_output_dir

    if args.output:  # before the steps: never into a run's own files, nor over the config
        check_output_dir(args.output, "--output", ("lr_find.csv", "lr_find.png"), verb="lr-find",
                         inputs=[(args.config, "the config being read")])  # fmt: skip
    cfg = load_config(args)
    lr_find(cfg, start_lr=args.start_lr, end_lr=args.end_lr, steps=args.steps, output=args.output)
    return 0
