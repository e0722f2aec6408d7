"""docs/finetuning.md runs as written: the config with optim.groups and an unfreeze
callback, its resume, and the Python fit(optimizer=, scheduler=) form."""

from __future__ import annotations

import csv
import re
import shlex

import pytest

from tests.conftest import REPO, read_summary
from tests.docs.test_readme import python_script, trainwell
from trainwell.engine.checkpointing.checkpoint import load_checkpoint

PAGE = (REPO / "docs" / "finetuning.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", PAGE, flags=re.S)


def block(lang: str, first_line: str) -> str:
    found = [body for kind, body in BLOCKS if kind == lang and body.startswith(first_line)]
    assert len(found) == 1, f"docs/finetuning.md: one {lang} block starting {first_line!r}"
    return found[0]


def lrs(path) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["name"].startswith("lr"):
                out.setdefault(int(row["step"]), {})[row["name"]] = float(row["value"])
    return out


@pytest.mark.slow
def test_the_finetuning_page_runs_as_written(tmp_path):
    (tmp_path / "finetune.py").write_text(block("python", "# finetune.py"))
    (tmp_path / "finetune.yaml").write_text(block("yaml", "# finetune.yaml"))
    commands = block("bash", "trainwell train --config finetune.yaml").splitlines()
    assert len(commands) == 2
    run = tmp_path / "runs" / "ft"
    proc = trainwell(shlex.split(commands[0])[1:], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = load_checkpoint(run / "checkpoints" / "last.pt")
    # The backbone was frozen for epoch 0 and trained after, at a tenth of the head's lr.
    assert first["frozen"] == []
    rows = lrs(run / "metrics.csv")
    assert rows and all(r["lr/backbone"] == pytest.approx(r["lr"] * 0.1) for r in rows.values())
    summary = read_summary(run)
    assert summary["status"] == "completed" and summary["final"]["val/accuracy"] > 0.6
    proc = trainwell(shlex.split(commands[1])[1:], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resuming from" in proc.stdout
    assert read_summary(run)["steps"] == first["step"] // 4 * 6
    # The Python form, as written.
    (tmp_path / "example.py").write_text(block("python", "import torch, trainwell"))
    proc = python_script(tmp_path / "example.py", tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loss = float(proc.stdout.split()[-1])
    assert loss < 1.0  # chance for 3 classes: ln 3 = 1.10
    rows = lrs(tmp_path / "runs" / "ft-python" / "metrics.csv")
    assert rows[max(rows)]["lr/backbone"] == pytest.approx(3e-4 * 0.5 ** (max(rows) // 20))
