"""``trainwell runs``: the table of runs, its sort, JSON and diff; and the README's
report-and-runs section, run as written."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.docs_pages import page


def write_run(root: Path, name: str, started: str, acc: float, loss: float, **extra) -> Path:
    run = root / name
    run.mkdir(parents=True)
    summary = {"status": "completed", "started": started, "steps": 28, "wall_time_s": 75.0,
               "best": {"metric": "val/accuracy", "value": acc, "step": 28, "epoch": 1},
               "final": {"val/accuracy": acc, "val/loss": loss}, "resumed_from": None,
               **extra}  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary))
    config = f"optim:\n  lr: {acc / 10}\n  name: adamw\nrun:\n  dir: {run}\n"
    (run / "config.yaml").write_text(config)
    (run / "doctor.json").write_text(json.dumps({"findings": [{"code": "x"}] * int(acc * 10)}))
    return run


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "runs"
    write_run(root, "old", "2026-01-01T10:00:00+0000", 0.5, 1.0)
    write_run(root, "new", "2026-03-01T10:00:00+0000", 0.9, 0.7, resumed_from="x/last.pt")
    write_run(root, "mid", "2026-02-01T10:00:00+0000", 0.7, 0.2)
    (root / "not-a-run").mkdir()
    return root


def names(out: str) -> list[str]:
    return [line.split()[0] for line in out.strip().splitlines()[1:]]


def test_the_table_is_newest_first_with_every_column(cli, root):
    code, out, err = cli("runs", str(root))
    assert code == 0, err
    header, *rows = out.strip().splitlines()
    assert header.split() == ["name", "status", "best", "steps", "wall", "findings", "resumed"]
    assert names(out) == ["new", "mid", "old"]
    assert rows[0].split() == ["new", "completed", "val/accuracy", "0.9", "28", "1", "min",
                               "15", "s", "9", "yes"]  # fmt: skip
    assert rows[2].split()[-2:] == ["5", "no"]


def test_sort_puts_the_best_first_in_the_metrics_direction(cli, root):
    assert names(cli("runs", str(root), "--sort", "val/accuracy")[1]) == ["new", "mid", "old"]
    assert names(cli("runs", str(root), "--sort", "val/loss")[1]) == ["mid", "new", "old"]
    code, out, err = cli("runs", str(root), "--sort", "val/acc")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "no run has metric 'val/acc'" in err


def test_json(cli, root):
    code, out, _ = cli("runs", str(root), "--json")
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["new", "mid", "old"]
    assert rows[0]["resumed"] is True and rows[0]["findings"] == 9
    assert rows[0]["best_value"] == 0.9 and rows[0]["final"]["val/loss"] == 0.7


def test_diff_shows_the_config_keys_that_differ(cli, root):
    code, out, err = cli("runs", "--diff", str(root / "old"), str(root / "new"))
    assert code == 0, err
    # The config keys that differ come first (run.dir is left out), then a blank line and
    # what each run got.
    config, _, outcome = out.partition("\n\n")
    assert config.strip().splitlines() == ["optim.lr  0.05  ->  0.09"]
    assert [ln.split()[0] for ln in outcome.strip().splitlines()][-1] == "wall"
    code, _, err = cli("runs", "--diff", str(root / "old"), str(root / "not-a-run"))
    assert code == 2 and "not-a-run is not a run directory" in err


def test_bad_folders_are_one_line(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    assert cli("runs", "empty") == (0, "no runs in empty\n", "")
    code, out, err = cli("runs", "nowhere")
    assert code == 2 and err.strip() == "trainwell: error: runs: nowhere does not exist"


README = page("reports.md")  # the README's report section, moved to its page


def readme_commands() -> list[str]:
    """The bash block of the README's report section (it starts with the two runs)."""
    blocks = re.findall(r"```bash\n(trainwell train train\.epochs=1 run\.dir=runs/first\n.*?)```",
                        README, flags=re.S)  # fmt: skip
    assert len(blocks) == 1, "README: expected one block of the report section"
    return [line for line in blocks[0].splitlines() if line.strip()]


@pytest.mark.slow
def test_the_readme_section_runs_as_written(cli, tmp_path):
    for line in readme_commands():
        args = shlex.split(line.split("#")[0])
        assert args[0] == "trainwell", line
        code, out, err = cli(*args[1:])
        assert code == 0, f"{line}\n{err[-2000:]}"
    assert (tmp_path / "runs" / "first" / "report.html").exists()
    assert "Runs compared" in (tmp_path / "compare.html").read_text()
    assert (REPO / "docs" / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert "](report.png)" in README  # docs/report.png, beside the page
