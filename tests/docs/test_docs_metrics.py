"""The metrics page (docs/metrics.md; the README summarizes it) runs as written."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.conftest import REPO, read_summary
from tests.docs.test_readme import python_script, trainwell

MARK = "```python\n# my_metrics.py\n"
# Where the section lives: the README once it is merged there, else its own page.
PAGES = (REPO / "README.md", REPO / "docs" / "metrics.md")  # the README keeps a link only
TEXT = next(t for t in (p.read_text() for p in PAGES if p.exists()) if MARK in t)
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", TEXT, flags=re.S)


def block(lang: str, first_line: str) -> str:
    found = [body for kind, body in BLOCKS if kind == lang and body.startswith(first_line)]
    assert len(found) == 1, f"expected one {lang} block starting {first_line!r}"
    return found[0]


@pytest.mark.slow
def test_the_metrics_example_runs_as_written(tmp_path):
    (tmp_path / "my_metrics.py").write_text(block("python", "# my_metrics.py"))
    (tmp_path / "metrics.yaml").write_text(block("yaml", "# metrics.yaml"))
    for line in block("bash", "trainwell train --config metrics.yaml").splitlines():
        args = shlex.split(line)
        proc = trainwell([*args[1:], "train.precision=fp32"], tmp_path)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
    (run,) = (tmp_path / "runs").iterdir()
    summary = read_summary(run)
    assert summary["status"] == "completed" and summary["monitor"] == "val/f1"
    assert summary["best"]["metric"] == "val/f1" and summary["best"]["value"] > 0.8
    assert {"val/f1", "val/gap", "test/f1"} <= set(summary["final"])
    # Early stopping on val/f1 or all 12 epochs: either way, the reason is said.
    assert summary["stop_reason"] in ("epochs",) or "val/f1" in summary["stop_reason"]
    script = block("python", "import trainwell\n")
    (tmp_path / "example.py").write_text(script)
    proc = python_script(tmp_path / "example.py", tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    f1, test_f1, gap = (float(v) for v in proc.stdout.split()[-3:])
    assert 0.5 < f1 <= 1 and 0.5 < test_f1 <= 1 and abs(gap) < 5


def test_the_step_shown_returns_what_the_objects_take():
    import torch
    from torch import nn

    namespace: dict = {}
    exec(block("python", "import torch.nn.functional as F\n"), namespace)
    out = namespace["step"](nn.Linear(3, 4), (torch.randn(5, 3), torch.tensor([0, 1, 2, 3, 0])))
    assert set(out) == {"loss", "preds", "target"} and out["preds"].shape == (5, 4)
    assert torch.allclose(out["preds"].sum(1), torch.ones(5))


def test_the_macro_f1_shown_is_sklearns():
    import torch
    from sklearn.metrics import f1_score

    namespace: dict = {}
    exec(block("python", "# my_metrics.py"), namespace)
    metric = namespace["MacroF1"](num_classes=4)
    g = torch.Generator().manual_seed(0)
    preds, target = torch.randn(50, 4, generator=g), torch.randint(0, 4, (50,), generator=g)
    for i in range(0, 50, 16):
        metric.update(preds[i : i + 16], target[i : i + 16])
    other = namespace["MacroF1"](num_classes=4)
    other.update(preds[:7], target[:7])
    expected = f1_score(target, preds.argmax(1), average="macro")
    assert metric.compute() == pytest.approx(expected, abs=1e-12)
    metric.merge(other)
    both = f1_score(torch.cat([target, target[:7]]), torch.cat([preds, preds[:7]]).argmax(1),
                    average="macro")  # fmt: skip
    assert metric.compute() == pytest.approx(both, abs=1e-12)
