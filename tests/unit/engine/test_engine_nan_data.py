"""One NaN/Inf in the data, through both of the doctor's paths: ``trainwell doctor`` on a
hand-written loop and ``trainwell train`` (the engine with a user's data set) name it
``nonfinite-input``; the engine's failure message names the data, not the learning rate.
"""

from __future__ import annotations

import json
import textwrap

import pytest

DATA = textwrap.dedent(
    """
    import torch
    from torch.utils.data import SequentialSampler, TensorDataset

    def make(kind="nan", bad=(0,), n=64, regression=False, in_target=False):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, 4, generator=g)
        y = x.sum(1, keepdim=True) if regression else torch.arange(n) % 3
        for i in bad:
            if in_target:
                y[i] = float(kind)
            else:
                x[i, 1] = float(kind)
        val = TensorDataset(torch.randn(16, 4, generator=g), y[:16].nan_to_num(0.0, 0.0, 0.0))
        return TensorDataset(x, y), val

    def in_order(dataset):
        return SequentialSampler(dataset)
    """
)

LOOP = textwrap.dedent(
    """
    import torch
    from torch.utils.data import DataLoader
    from {module} import make

    train, _ = make(**{kwargs!r})
    regression = {regression!r}
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1 if regression else 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in DataLoader(train, batch_size=8):
        opt.zero_grad()
        out = model(x)
        if regression:
            loss = torch.nn.functional.mse_loss(out, y)
        else:
            loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
    """
)

# name: (factory kwargs, the batch (1-based) that first holds the bad value)
CASES = {
    "nan_inputs": ({"kind": "nan", "bad": [0, 9, 20]}, 1),
    "inf_inputs": ({"kind": "inf", "bad": [2]}, 1),
    "neg_inf_inputs": ({"kind": "-inf", "bad": [5, 6]}, 1),
    "nan_in_one_late_batch": ({"kind": "nan", "bad": [50]}, 7),
    "inf_in_a_middle_batch": ({"kind": "inf", "bad": [29]}, 4),
    "nan_in_regression_targets": (
        {"kind": "nan", "bad": [11], "regression": True, "in_target": True},
        2,
    ),
}


def _overrides(module: str, kwargs: dict) -> list[str]:
    out = [f"data.name={module}:make", f"data.sampler={module}:in_order", "model.name=mlp",
           "model.kwargs.hidden=[16]", "data.batch_size=8", "train.epochs=1",
           "run.dir=run"]  # fmt: skip
    for key, value in kwargs.items():
        text = json.dumps(value) if not isinstance(value, str) else value
        out.append(f"data.kwargs.{key}={text.replace(' ', '')}")
    if kwargs.get("regression"):
        out += ["train.loss=mse", "model.kwargs.num_classes=1"]
    return out


def _findings(folder) -> list[dict]:
    return json.loads((folder / "doctor.json").read_text())["findings"]


def _nonfinite_input(findings: list[dict]) -> dict:
    found = [f for f in findings if f["code"] == "nonfinite-input"]
    assert len(found) == 1, [f["code"] for f in findings]
    return found[0]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_fault_named_by_the_doctor_and_by_the_engine(cli, tmp_path, case):
    kwargs, batch = CASES[case]
    module = f"nandata_{case}"  # one module per case: in-process runs share sys.modules
    (tmp_path / f"{module}.py").write_text(DATA)
    regression = bool(kwargs.get("regression"))
    (tmp_path / "loop.py").write_text(
        LOOP.format(module=module, kwargs=kwargs, regression=regression)
    )

    # 1. The hand-written loop under `trainwell doctor`.
    code, _, err = cli("doctor", "--json", "doctor.json", "loop.py")
    assert code == 0, err
    by_hand = _nonfinite_input(json.loads((tmp_path / "doctor.json").read_text())["findings"])
    assert by_hand["evidence"]["batch_index"] == batch

    # 2. The engine, on the same data set given by data.name.
    code, out, err = cli("train", *_overrides(module, kwargs))
    engine = _nonfinite_input(_findings(tmp_path / "run"))
    assert engine["evidence"]["batch_index"] == batch
    assert engine["file"].endswith(f"{module}.py") and engine["line"] > 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert code == 1 and summary["status"] == "failed", (code, err)
    line = err.strip().splitlines()[-1]
    assert line.startswith("trainwell: failed: ") and "nonfinite-input" in line, line
    assert "the data holds NaN/Inf" in line and "lower optim.lr" not in line, line
    assert "nonfinite-input" in summary["error"]


@pytest.mark.slow
def test_a_diverging_lr_on_clean_data_still_points_at_the_lr(cli, tmp_path):
    """The message changes only when the data is at fault: clean data and an lr of 10."""
    (tmp_path / "cleandata.py").write_text(DATA)
    args = _overrides("cleandata", {"bad": [], "regression": True})
    code, _, err = cli("train", *args, "optim.name=sgd", "optim.lr=10", "train.grad_clip=0",
                       "train.precision=fp32")  # fmt: skip
    findings = json.loads((tmp_path / "run" / "doctor.json").read_text())["findings"]
    assert not [f for f in findings if f["code"] == "nonfinite-input"]
    assert code == 1, err
    assert "lower optim.lr" in err and "the data holds" not in err, err


@pytest.mark.slow
def test_fit_from_python_names_the_data_too(tmp_path, monkeypatch):
    """``trainwell.fit(train_data=...)`` with NaN in the data: the same finding."""
    import torch
    from torch.utils.data import TensorDataset

    import trainwell
    from trainwell.errors import Diverged

    monkeypatch.chdir(tmp_path)
    x = torch.randn(48, 4)
    x[::5, 0] = float("nan")
    cfg = trainwell.load_config(overrides=["model.name=mlp", "model.kwargs.hidden=[8]",
                                           "data.batch_size=8", "train.epochs=1", "run.dir=run",
                                           "model.kwargs.num_classes=3"])  # fmt: skip
    with pytest.raises(Diverged, match="nonfinite-input"):
        trainwell.fit(cfg, train_data=TensorDataset(x, torch.arange(48) % 3),
                      val_data=TensorDataset(torch.randn(8, 4), torch.arange(8) % 3))  # fmt: skip
    _nonfinite_input(_findings(tmp_path / "run"))


@pytest.mark.slow
@pytest.mark.parametrize("case", ["nan_inputs", "nan_in_regression_targets"])
def test_the_cli_as_a_real_process_names_the_data(tmp_path, case):
    """As a user runs it: no test frame on the stack, the engine's loop alone."""
    from tests.conftest import run_subprocess

    kwargs, batch = CASES[case]
    module = f"procdata_{case}"
    (tmp_path / f"{module}.py").write_text(DATA)
    proc = run_subprocess(["train", *_overrides(module, kwargs)], tmp_path)
    assert proc.returncode == 1, proc.stderr
    engine = _nonfinite_input(_findings(tmp_path / "run"))
    assert engine["evidence"]["batch_index"] == batch
    assert engine["file"].endswith(f"{module}.py")
    line = proc.stderr.strip().splitlines()[-1]
    assert "nonfinite-input" in line and "lower optim.lr" not in line, line
