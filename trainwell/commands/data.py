"""``trainwell data``: look at the data before training; warnings in plain words."""

from __future__ import annotations

import argparse

from trainwell.commands.common import Subparsers, add_config, add_debug, add_overrides, load_config


def register(sub: Subparsers) -> None:
    """Add the ``data`` verb."""
    data = sub.add_parser(
        "data",
        help="look at the data before training: sizes, labels, input statistics, first batch",
        description="Build the config's data as `trainwell train` would (same --config and "
        "KEY=VALUE overrides) and report, for each split, its size, label counts (classes "
        "that never appear, a split missing a class, labels that are not 0..C-1, the "
        "majority class's share), input statistics (mean, std, min, max, NaN/Inf; per "
        "channel for images), the lengths of variable-length samples and the first batch "
        "after the collate; with --out, a grid of labelled images. Nothing is trained.",
    )
    add_config(data)
    data.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    data.add_argument(
        "--out", metavar="DIR", help="folder for the sample grids (samples_<split>.png)"
    )
    data.add_argument(
        "--max-samples",
        type=int,
        default=10_000,
        metavar="N",
        help="statistics over at most N samples per split, drawn evenly (default 10000); "
        "labels a data set exposes (.targets) are counted in full",
    )
    data.add_argument(
        "--seconds",
        type=float,
        default=60.0,
        metavar="S",
        help="time budget for reading, shared by the splits (default 60)",
    )
    add_debug(data)
    add_overrides(data)
    data.set_defaults(handler=_data)


def _data(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from trainwell.datacheck.grid import write_grid
    from trainwell.datacheck.render import render, to_json
    from trainwell.datacheck.report import inspect_data

    _check_args(args)  # before the data is read: a typo should not cost the reading
    cfg = load_config(args)
    report = inspect_data(cfg, max_samples=args.max_samples, seconds=args.seconds)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, split in report.splits.items():
            written = write_grid(split, out / f"samples_{name}.png")
            if written is not None:
                report.grids.append(str(written))
    render(report)
    for path in report.grids:
        print(f"wrote {path}")
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(report), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _check_args(args: argparse.Namespace) -> None:
    from pathlib import Path

    from trainwell.errors import UserError

    if args.max_samples < 1:
        raise UserError(f"--max-samples: expected a positive number, got {args.max_samples}")
    if not args.seconds > 0:
        raise UserError(f"--seconds: expected a positive number, got {args.seconds}")
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        raise UserError(f"--out: {out} is a file; give a folder")
    # A --json inside --out is fine: that folder is made after the reading.
    if args.json and not (out is not None and Path(args.json).parent == out):
        target = Path(args.json)
        if target.is_dir():
            raise UserError(f"--json: {target} is a folder; give a file path")
        if not target.parent.is_dir():
            raise UserError(f"--json: the folder {target.parent} does not exist")
