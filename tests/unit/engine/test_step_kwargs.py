"""train.step_kwargs / train.eval_step_kwargs: a distillation step configured without a
closure or an environment variable."""

from __future__ import annotations

import textwrap

import pytest

from tests.conftest import read_summary

DISTILL = '''
"""Knowledge distillation: a fixed teacher's softened outputs guide a small student."""
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

_TEACHERS = {}


def make_data(n=256):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 6, generator=g)
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())


def teacher(width):
    if width not in _TEACHERS:
        torch.manual_seed(123)
        _TEACHERS[width] = nn.Sequential(nn.Linear(6, width), nn.Tanh(), nn.Linear(width, 2))
    return _TEACHERS[width]


def step(model, batch, temperature=1.0, alpha=0.5, teacher_width=16):
    x, y = batch
    logits = model(x)
    with torch.no_grad():
        soft = F.softmax(teacher(teacher_width)(x) / temperature, dim=-1)
    kd = F.kl_div(F.log_softmax(logits / temperature, dim=-1), soft, reduction="batchmean")
    loss = alpha * kd * temperature**2 + (1 - alpha) * F.cross_entropy(logits, y)
    return {"loss": loss, "temperature": torch.tensor(float(temperature)),
            "alpha": torch.tensor(float(alpha))}


def eval_step(model, batch, scale=1.0):
    x, y = batch
    logits = model(x)
    return {"loss": F.cross_entropy(logits, y), "scale": torch.tensor(float(scale))}
'''

BASE = ["data.name=distill:make_data", "model.name=mlp", "model.kwargs.hidden=[16]",
        "train.epochs=1", "data.batch_size=32", "train.precision=fp32",
        "train.log_every=1"]  # fmt: skip


@pytest.fixture
def task(tmp_path):
    (tmp_path / "distill.py").write_text(textwrap.dedent(DISTILL))
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "temperature", "alpha"),
    [
        (["train.step_kwargs.temperature=4.0"], 4.0, 0.5),
        (["train.step_kwargs={temperature: 2.5, alpha: 0.9}"], 2.5, 0.9),
        ([], 1.0, 0.5),  # no kwargs: the function's defaults
    ],
)
def test_the_step_gets_its_keywords(cli, task, overrides, temperature, alpha):
    code, out, err = cli("train", *BASE, "train.step=distill:step", *overrides, "run.dir=run")
    assert code == 0, err
    final = read_summary(task / "run")["final"]
    assert final["train/temperature"] == pytest.approx(temperature)
    assert final["train/alpha"] == pytest.approx(alpha)
    # Without train.eval_step, evaluation runs the train step with the same keywords.
    assert final["val/temperature"] == pytest.approx(temperature)


@pytest.mark.slow
def test_a_yaml_config_and_an_eval_step_with_its_own_keywords(cli, task):
    (task / "kd.yaml").write_text(textwrap.dedent("""
        train:
          step: distill:step
          step_kwargs: {temperature: 3.0, teacher_width: 8}
          eval_step: distill:eval_step
          eval_step_kwargs: {scale: 7}
    """))
    code, out, err = cli("train", "--config", "kd.yaml", *BASE, "run.dir=run")
    assert code == 0, err
    final = read_summary(task / "run")["final"]
    assert final["train/temperature"] == pytest.approx(3.0)
    assert final["val/scale"] == pytest.approx(7.0)
    assert "val/temperature" not in final
    # The resolved config keeps them: the run reruns as it trained.
    assert "temperature: 3.0" in (task / "run" / "config.yaml").read_text()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["train.step=distill:step", "train.step_kwargs.temprature=4"],
         "train.step_kwargs: step(model, batch, temperature, alpha, teacher_width) does not "
         "take them"),
        (["train.step_kwargs.temperature=4"], "train.step_kwargs: given without train.step"),
        (["train.step=distill:step", "train.eval_step_kwargs.scale=2"],
         "train.eval_step_kwargs: given without train.eval_step"),
        (["train.step=distill:step", "train.eval_step=distill:eval_step",
          "train.eval_step_kwargs.temperature=2"], "train.eval_step_kwargs: eval_step("),
    ],
)  # fmt: skip
def test_bad_keywords_are_one_line_before_the_run_dir(cli, task, overrides, expected):
    code, _out, err = cli("train", *BASE, *overrides, "run.dir=run")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], err
    assert not (task / "run").exists()


@pytest.mark.slow
def test_fit_from_python_with_the_keywords_in_the_config(task, monkeypatch):
    from rich.console import Console

    import trainwell

    monkeypatch.syspath_prepend(str(task))
    monkeypatch.chdir(task)
    overrides = [*BASE, "train.step=distill:step", "train.step_kwargs.alpha=0.25", "run.dir=py"]
    cfg = trainwell.load_config(overrides=overrides)
    result = trainwell.fit(cfg, console=Console(quiet=True))
    assert result.metrics["train/alpha"] == pytest.approx(0.25)
    assert result.metrics["train/temperature"] == pytest.approx(1.0)
