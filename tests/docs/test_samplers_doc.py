"""The samplers section runs as written: a balancing sampler on 1 and 2 processes.

The section is docs/samplers.md until it moves into the README; the test reads it from
wherever it is.
"""

from __future__ import annotations

import re
import shlex

import pytest
import torch

from tests.conftest import REPO, read_summary
from tests.docs.test_readme import trainwell
from tests.docs_pages import docs_text

README = docs_text()
DOC = README if "# balance.py" in README else (REPO / "docs" / "samplers.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", DOC, flags=re.S)


def block(lang: str, first_line: str) -> str:
    found = [body for kind, body in BLOCKS if kind == lang and body.startswith(first_line)]
    assert len(found) == 1, f"expected one {lang} block starting {first_line!r}"
    return found[0]


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_the_balancing_sampler_example_runs_as_written(tmp_path):
    (tmp_path / "balance.py").write_text(block("python", "# balance.py"))
    (tmp_path / "balance.yaml").write_text(block("yaml", "# balance.yaml"))
    runs = []
    for line in block("bash", "trainwell train --config balance.yaml").splitlines():
        args = shlex.split(line)
        assert args[0] == "trainwell"
        before = set((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else set()
        proc = trainwell(args[1:], tmp_path)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        (run,) = set((tmp_path / "runs").glob("*")) - before
        runs.append(read_summary(run))
    one, two = runs
    assert (one["world_size"], two["world_size"]) == (1, 2)
    # The global batch holds on 2 processes: the same steps, the same samples per step.
    assert one["steps_per_epoch"] == two["steps_per_epoch"] == 1800 // 64
    assert two["batch"] == {"global": 64, "micro": 32, "grad_accum_steps": 1}
    assert two["final"]["val/loss"] == pytest.approx(one["final"]["val/loss"], rel=0.05)
