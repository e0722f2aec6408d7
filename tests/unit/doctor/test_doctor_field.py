"""The doctor on the field corpus: correct scripts in the shape of published ones (no
warning or error) and one planted bug in each copy (named, at its line).

The scripts live in ``tests/doctor_field/`` (see its README); ``benchmarks/doctor_field.py``
prints the same judgement as a score.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from trainwell.cli import main

FIELD = Path(__file__).resolve().parents[2] / "doctor_field"
sys.path.insert(0, str(FIELD))
from _field import cases, judge  # noqa: E402

# Planted bugs the doctor does not name yet, each with why; strict, so a fix shows up.
KNOWN_MISSES = {
    "ddp_spawn_no_zero_grad": "under DDP the gradient added is the all-reduced one, not "
    "the local one the probe's hook sums, so missing-zero-grad cannot tell a sum from one",
}
# The longer cases are marked slow: the fast lane (-m "not slow") runs the others.
SLOW = {
    line.strip()
    for line in (FIELD / "_slow.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
}


def _marks(name: str) -> list:
    marks = [pytest.mark.slow] if name in SLOW else []
    if name in KNOWN_MISSES:
        marks.append(pytest.mark.xfail(reason=KNOWN_MISSES[name], strict=True))
    return marks


CASES = [pytest.param(c, marks=_marks(c.name)) for c in cases()]


def test_every_slow_case_is_a_case():
    unknown = SLOW - {c.name for c in cases()}
    assert not unknown, f"tests/doctor_field/_slow.txt names no case: {unknown}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_field_case(case, tmp_path, monkeypatch, capsys):
    script = tmp_path / f"{case.name}.py"
    script.write_text(case.text)
    monkeypatch.chdir(tmp_path)
    # A free port for the scripts that take MASTER_PORT from the environment when it is set
    # (their own default is a fixed one, which two runs at once on one machine share).
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    out = tmp_path / "report.json"
    code = main(["doctor", "--json", str(out), *case.doctor_args, str(script)])
    err = capsys.readouterr().err
    assert code == (1 if case.crash else 0), err
    findings = json.loads(out.read_text())["findings"]
    assert judge(case, findings) == [], err
