"""Escape sequences in run folder names never reach the terminal (issue 25, item 17).

A run folder copied from elsewhere (or made with ``mkdir $'\\e]0;...'``) can carry ESC,
CSI, OSC and BEL bytes in its name; ``trainwell runs``, ``report`` and the error lines
print names, escaped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainwell.printable import printable

ROOT = Path(__file__).resolve().parents[3]

# Raw bytes a terminal acts on: OSC title + BEL, CSI clear screen, 8-bit CSI, DEL,
# a carriage return that overwrites the line, a right-to-left override.
EVIL_NAMES = [
    b"evil\x1b]0;pwned\x07x",
    b"clear\x1b[2J\x1b[H",
    b"c1\x9b31mred",
    b"cr\rfake-completed\x7f",
    "rtl\u202egnp.exe".encode(),
    b"nl\nsecond-line\x08\x00"[:-1],
]
RAW = (b"\x1b", b"\x07", b"\x9b", b"\r", b"\x7f", "\u202e".encode(), b"\x08")


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainwell", *argv],
        cwd=cwd,
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("esc")
    done = _cli("train", "train.max_steps=1", "run.dir=runs/good", cwd=base)
    assert done.returncode == 0, done.stderr
    for name in EVIL_NAMES:
        target = os.path.join(os.fsencode(base / "runs"), name)
        shutil.copytree(base / "runs" / "good", os.fsdecode(target))
    # A run name inside summary.json with escapes too.
    summary = base / "runs" / "good" / "summary.json"
    data = json.loads(summary.read_text())
    data["status"] = "completed\x1b[5m"
    summary.write_text(json.dumps(data))
    return base


def _no_raw(stream: bytes) -> None:
    for raw in RAW:
        assert raw not in stream, (raw, stream[:400])


@pytest.mark.slow
def test_runs_table_escapes_names(runs_dir):
    done = _cli("runs", "runs", cwd=runs_dir)
    assert done.returncode == 0, done.stderr
    _no_raw(done.stdout + done.stderr)
    out = done.stdout.decode()
    assert "evil\\x1b]0;pwned\\x07x" in out
    assert "c1\\x9b31mred" in out
    assert "rtl\\u202egnp.exe" in out
    # One table line per run: a newline in a name does not make a fake row.
    assert len(out.strip().splitlines()) == 1 + 1 + len(EVIL_NAMES)


@pytest.mark.slow
def test_runs_json_is_escaped_by_json(runs_dir):
    done = _cli("runs", "runs", "--json", cwd=runs_dir)
    assert done.returncode == 0
    _no_raw(done.stdout)
    names = {row["name"] for row in json.loads(done.stdout)}
    assert os.fsdecode(EVIL_NAMES[0]) in names


@pytest.mark.slow
def test_report_and_diff_escape_names(runs_dir):
    evil = [os.fsdecode(os.path.join(b"runs", n)) for n in EVIL_NAMES[:3]]
    done = _cli("report", *evil, "--out", "r.html", cwd=runs_dir)
    assert done.returncode == 0, done.stderr
    _no_raw(done.stdout + done.stderr)
    done = _cli("runs", "--diff", evil[0], evil[1], cwd=runs_dir)
    assert done.returncode == 0, done.stderr
    _no_raw(done.stdout + done.stderr)


@pytest.mark.slow
def test_error_lines_escape_what_they_quote(runs_dir):
    missing = os.fsdecode(b"nothing\x1b]0;x\x07here")
    for argv in (["runs", missing], ["report", missing], ["predict", missing, "--split", "val"]):
        done = _cli(*argv, cwd=runs_dir)
        assert done.returncode == 2, (argv, done.stderr)
        _no_raw(done.stdout + done.stderr)
        assert b"nothing\\x1b]0;x\\x07here" in done.stderr


@pytest.mark.parametrize(
    "text,shown",
    [
        ("a\x1b[31mb", "a\\x1b[31mb"),
        ("bell\x07", "bell\\x07"),
        ("c1\x9b", "c1\\x9b"),
        ("tab\tnl\n", "tab\\x09nl\\x0a"),
        ("bidi\u2066x\u2069", "bidi\\u2066x\\u2069"),
        (b"\xff\xfe".decode("utf-8", "surrogateescape"), "\\xff\\xfe"),
        ("plain-name_1 é 漢", "plain-name_1 é 漢"),
    ],
)
def test_printable(text, shown):
    assert printable(text) == shown
    assert printable(text, keep="\n\t") == shown.replace("\\x09", "\t").replace("\\x0a", "\n")
