"""``trainwell report`` (an HTML page of runs) and ``trainwell runs`` (a table of runs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from trainwell.commands.common import Subparsers
from trainwell.printable import printable


def register(sub: Subparsers) -> None:
    """Add the ``report`` and ``runs`` verbs."""
    report = sub.add_parser(
        "report",
        help="one self-contained HTML report of a run, or of several compared",
        description="Write an HTML page that opens with no network: status, curves, memory "
        "timeline, doctor findings, checkpoints, config and environment. With several runs, "
        "the curves are overlaid and the config keys that differ are listed.",
    )
    report.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories")
    report.add_argument(
        "--out",
        metavar="FILE",
        help="where to write (default: RUN_DIR/report.html for one run, report.html here "
        "for several)",
    )
    report.set_defaults(handler=_report)

    runs = sub.add_parser(
        "runs",
        help="a table of runs (newest first), or the config keys two runs differ in",
        description="List the runs in DIR (default: runs): name, status, best metric, steps, "
        "wall time, doctor findings, resumed or not.",
    )
    runs.add_argument("dir", nargs="?", default="runs", metavar="DIR")
    runs.add_argument(
        "--sort", metavar="METRIC", help="best first by this metric (e.g. val/accuracy)"
    )
    runs.add_argument("--json", action="store_true", help="print the table as JSON")
    runs.add_argument(
        "--diff", nargs=2, metavar=("RUN_A", "RUN_B"), help="the config keys that differ"
    )
    runs.set_defaults(handler=_runs)


def _report(args: argparse.Namespace) -> int:
    from trainwell.report import write_report_and_runs
    from trainwell.report.compare import task_mismatch

    out = Path(args.out) if args.out else None
    if out is None:
        out = Path(args.runs[0]) / "report.html" if len(args.runs) == 1 else Path("report.html")
    if out.is_dir():
        out = out / "report.html"
    from trainwell.outputs import check_output

    # A run's own report.html is the report's to write; its other files are not.
    check_output(out, "--out", verb="report", own=("report.html",),
                 inputs=[(run, "a run being reported") for run in args.runs])  # fmt: skip
    target, runs = write_report_and_runs(args.runs, out)
    for run in runs:
        if run.status == "running":
            note = f"note: {run.name} is still running: the report shows what it wrote so far"
            print(printable(note))
        for note in run.notes:
            print(printable(f"note: {run.name}: {note}"))
    mismatch = task_mismatch(runs)
    if mismatch:
        print(printable(f"note: {mismatch}"))
    partial = " (partial)" if mismatch or any(run.partial for run in runs) else ""
    print(printable(f"report: {target}{partial}"))
    return 0


def _runs(args: argparse.Namespace) -> int:
    from trainwell.report import runs as runs_mod

    if args.diff:
        return _diff(args.diff)
    rows = runs_mod.list_runs(args.dir, sort=args.sort)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    elif not rows:
        print(printable(f"no runs in {args.dir}"))
    else:
        print(runs_mod.format_table(rows))
    return 0


def _diff(paths: list[str]) -> int:
    from trainwell.report import load_run
    from trainwell.report.compare import config_diff, task_mismatch
    from trainwell.report.outcome import outcome_rows, scaling_line

    runs = [load_run(p) for p in paths]
    rows = config_diff(runs)
    if not rows:
        print("no config key differs (run.dir aside)")
    width = max((len(key) for key, _ in rows), default=0)
    for key, (a, b) in rows:
        print(printable(f"{key.ljust(width)}  {a}  ->  {b}"))
    outcome = outcome_rows(runs)
    if outcome:
        print()
        width = max(len(what) for what, _ in outcome)
        for what, values in outcome:
            print(printable(f"{what.ljust(width)}  {'  ->  '.join(values)}"))
    verdict = scaling_line(runs)
    if verdict:
        print(verdict)
    mismatch = task_mismatch(runs)
    if mismatch:
        print(printable(f"note: {mismatch}"))
    return 0
