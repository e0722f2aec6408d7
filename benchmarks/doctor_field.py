"""Score the doctor on the field corpus: planted bugs named at their line, false alarms.

    python benchmarks/doctor_field.py [--only NAME_SUBSTRING] [--json PATH]

Each case runs ``trainwell doctor`` as a real process (as a user would), so the figures
include the machine's load. Prints one line per case and the totals.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "doctor_field"))
from _field import cases, judge  # noqa: E402


def run_case(case, tmp: Path) -> tuple[list[str], float]:
    script = tmp / f"{case.name}.py"
    script.write_text(case.text)
    out = tmp / f"{case.name}.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "trainwell", "doctor", "--json", str(out), *case.doctor_args,
         str(script)], cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - start
    if not out.exists():
        return [f"no report (exit {proc.returncode}): {proc.stderr.strip()[-200:]}"], took
    problems = judge(case, json.loads(out.read_text())["findings"])
    if proc.returncode != (1 if case.crash else 0):
        problems.append(f"exit {proc.returncode}")
    return problems, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases():
            if args.only not in case.name:
                continue
            problems, took = run_case(case, Path(tmp))
            kind = "ok" if not case.expected else "bug"
            rows.append({"case": case.name, "kind": kind, "problems": problems, "s": took})
            print(f"{'PASS' if not problems else 'FAIL'} {kind:3} {case.name:45} {took:5.1f}s "
                  f"{'; '.join(problems)}", flush=True)
    bugs = [r for r in rows if r["kind"] == "bug"]
    oks = [r for r in rows if r["kind"] == "ok"]
    named = sum(not r["problems"] for r in bugs)
    alarms = sum(any(p.startswith("false alarm") for p in r["problems"]) for r in oks)
    print(f"planted bugs named at their line: {named}/{len(bugs)}; "
          f"correct scripts with a false alarm: {alarms}/{len(oks)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
