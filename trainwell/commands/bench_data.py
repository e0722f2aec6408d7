"""``trainwell bench-data``: the data pipeline alone, a sweep of loader settings, the verdict."""

from __future__ import annotations

import argparse
from pathlib import Path

from trainwell.commands.common import Subparsers, add_config, add_debug, add_overrides, load_config


def register(sub: Subparsers) -> None:
    """Add the ``bench-data`` verb."""
    bench = sub.add_parser(
        "bench-data",
        help="throughput of the data pipeline alone, a sweep of loader settings, and the "
        "recommended one",
        description="Run the training loader alone (as the config builds it, or your own "
        "DataLoader factory), sweep num_workers, pin_memory (with CUDA), persistent_workers "
        "and prefetch_factor within a time budget, and recommend the cheapest setting within "
        "5% of the fastest. With --model, also time the config's model on batches held in "
        "memory and say whether the data is the bottleneck.",
    )
    add_config(bench)
    bench.add_argument(
        "--loader",
        metavar="pkg.module:fn",
        help="a function returning a DataLoader (swept) or an iterable of batches (timed as "
        "given), instead of the config's data",
    )
    bench.add_argument(
        "--seconds",
        type=float,
        default=20.0,
        metavar="S",
        help="total time budget, shared by the settings (default 20)",
    )
    bench.add_argument("--json", metavar="PATH", help="also write the table as JSON")
    bench.add_argument(
        "--apply",
        metavar="FILE",
        help="write the recommended setting into this YAML config (data.num_workers, ...; "
        "created if missing, other keys kept)",
    )
    bench.add_argument(
        "--model",
        action="store_true",
        help="also time the config's model (forward, backward, optimizer) and say whether "
        "data or model is the bottleneck",
    )
    add_debug(bench)
    add_overrides(bench)
    bench.set_defaults(handler=_bench_data)


def _bench_data(args: argparse.Namespace) -> int:
    from trainwell.benchdata.apply import apply_setting, check_target
    from trainwell.benchdata.bench import bench_data, write_json
    from trainwell.benchdata.sweep import check_seconds
    from trainwell.outputs import check_output

    check_seconds(args.seconds)
    # Checked before the sweep: a typo in a path should not cost the whole budget.
    for flag, path in (("--json", args.json), ("--apply", args.apply)):
        _check_folder(flag, path)  # first: its wording is the one scripts know
    if args.json:
        read = [(args.config, "the config being read"), (args.apply, "the config --apply edits")]
        check_output(args.json, "--json", verb="bench-data", inputs=read)
    if args.apply:  # the config to change: may be --config itself, never a run's record
        check_output(args.apply, "--apply", verb="bench-data")
        check_target(args.apply)
    cfg = load_config(args)
    result = bench_data(cfg, loader=args.loader, seconds=args.seconds, model=args.model)
    # The config first: if it is refused, no JSON claims a finished run.
    if args.apply:
        setting = result.sweep.recommended.setting
        apply_setting(args.apply, setting, result.sweep.cuda)
        print(
            f"  applied       {' '.join(setting.overrides(pin=result.sweep.cuda))} to {args.apply}"
        )
    if args.json:
        print(f"  wrote         {write_json(result, args.json)}")
    return 0


def _check_folder(flag: str, path: str | None) -> None:
    from trainwell.errors import UserError

    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise UserError(f"{flag}: {target} is a folder; give a file path")
    if not target.parent.is_dir():
        raise UserError(f"{flag}: the folder {target.parent} does not exist")
