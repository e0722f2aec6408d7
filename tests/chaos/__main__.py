"""``python -m tests.chaos [--full] [--case TEXT] [--seed N] [--keep DIR] [-v] [--list]``

Without ``--full`` the short set runs (the one pytest runs). Prints a table of cases,
pass/fail counts per group, and ``chaos: N cases, P passed, F failed``; exits 1 if any
case failed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from tests.chaos.cases import GROUPS, select


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--full", action="store_true", help="every case, not the short set")
    parser.add_argument("--case", metavar="TEXT", help="only the cases whose id contains TEXT")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random instants")
    parser.add_argument("--keep", metavar="DIR", help="keep every case's folder under DIR")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="say what happens")
    parser.add_argument("--width", type=int, default=110, help="wrap reasons at this width")
    args = parser.parse_args(argv)
    cases = select(args.case, args.full)
    if args.list:
        for case in cases:
            print(f"{case.id:36} {'short' if case.short else ''}")
        return 0
    if not cases:
        print(f"chaos: no case matches {args.case!r}", file=sys.stderr)
        return 2
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="trainwell-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"chaos: {len(cases)} cases, seed {args.seed}, folders under {root}", flush=True)
    results = []
    for case in cases:
        began = time.time()
        outcome = case.run(root / case.id, seed=args.seed, verbose=args.verbose)
        took = time.time() - began
        results.append((case, outcome, took))
        print(f"  {outcome.label} {case.id} ({took:.1f}s)", flush=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    _table(results, args.width)
    ran = [(c, o) for c, o, _ in results if not o.skipped]
    n_pass = sum(o.ok for _, o in ran)
    n_fail = len(ran) - n_pass
    n_skip = len(results) - len(ran)
    print(f"chaos: {len(ran)} cases, {n_pass} passed, {n_fail} failed")
    if n_skip:
        print(f"chaos: {n_skip} skipped (see the table)")
    return 1 if n_fail else 0


def _table(results, width: int) -> None:
    id_w = max(len(c.id) for c, _, _ in results) + 2
    indent = " " * (id_w + 16)
    print()
    print(f"{'case':{id_w}}{'result':8}{'time':>6}  reason / what was seen")
    print("-" * width)
    for case, outcome, took in results:
        reason = outcome.reason or "-"
        lines = textwrap.wrap(reason, width=max(40, width - len(indent))) or ["-"]
        print(f"{case.id:{id_w}}{outcome.label:8}{took:5.0f}s  {lines[0]}")
        for line in lines[1:]:
            print(f"{indent}{line}")
    print()
    print(f"{'group':44}{'passed':>8}{'failed':>8}{'skipped':>9}")
    for group, title in GROUPS.items():
        mine = [o for c, o, _ in results if c.group == group]
        if not mine:
            continue
        ok = sum(o.ok and not o.skipped for o in mine)
        skip = sum(o.skipped for o in mine)
        print(f"{f'{group:>2}. {title}':44}{ok:8}{len(mine) - ok - skip:8}{skip:9}")
    print()


if __name__ == "__main__":
    raise SystemExit(main())
