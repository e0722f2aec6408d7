"""The console's last lines and summary.json say why a run stopped and whose weights
best.pt and FitResult.model hold; the dry step names train.step for model outputs the
default step cannot use."""

from __future__ import annotations

import io
import textwrap

import pytest
import torch
from rich.console import Console
from torch import nn
from torch.utils.data import TensorDataset

import trainwell
from tests.conftest import SYNTHETIC, read_summary
from trainwell.engine.step.step_fn import StepError


def fit_lines(overrides, **kw):
    out = io.StringIO()
    cfg = trainwell.load_config(overrides=[*SYNTHETIC, "train.precision=fp32", *overrides])
    result = trainwell.fit(cfg, console=Console(file=out, soft_wrap=True), **kw)
    return result, out.getvalue().splitlines()


def closing(lines):
    stopped = [line for line in lines if line.startswith("stopped: ")]
    weights = [line for line in lines if line.startswith("weights: ")]
    assert len(stopped) == 1 and len(weights) == 1, lines[-6:]
    return stopped[0], weights[0]


@pytest.mark.slow
def test_all_epochs_done(tmp_path):
    result, lines = fit_lines(["train.epochs=2", f"run.dir={tmp_path}"])
    stopped, weights = closing(lines)
    summary = read_summary(tmp_path)
    steps = summary["steps"]
    assert stopped == f"stopped: all 2 epochs done ({steps} steps)"
    assert summary["stop_reason"] == "epochs" and summary["stop"]["kind"] == "epochs"
    best = summary["best_checkpoint"]
    assert best["file"] == "best.pt" and best["monitor"] == "val/accuracy"
    shown = f"best.pt holds the best val/accuracy ({best['value']:.4g}, step {best['step']}"
    assert shown in weights
    assert "FitResult.model and the test metrics use it" in weights
    # And it is true: the model returned holds best.pt's weights.
    saved = torch.load(tmp_path / "checkpoints" / "best.pt", weights_only=True)["model"]
    for k, v in result.model.state_dict().items():
        assert torch.equal(v.cpu(), saved[k]), k


@pytest.mark.slow
def test_max_steps_reached(tmp_path):
    _, lines = fit_lines(["train.epochs=5", "train.max_steps=7", f"run.dir={tmp_path}"])
    stopped, _ = closing(lines)
    assert stopped == "stopped: train.max_steps=7 reached, at epoch 1 of 5"
    summary = read_summary(tmp_path)
    assert summary["stop"] == {"kind": "max_steps", "step": 7, "epoch": 1, "epochs": 5,
                               "max_steps": 7}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("patience", [1, 2])
def test_early_stopping_names_the_epoch_and_the_monitored_value(tmp_path, patience):
    # A learning rate this high makes val/loss worse after the first epochs.
    _, lines = fit_lines(["train.epochs=30", f"early_stop.patience={patience}",
                          "early_stop.monitor=val/loss", "optim.lr=0.3", "train.grad_clip=0",
                          f"run.dir={tmp_path}"])  # fmt: skip
    stopped, weights = closing(lines)
    summary = read_summary(tmp_path)
    stop = summary["stop"]
    assert stop["kind"] == "early_stopping" and stop["epoch"] < 30
    assert stop["value"] == pytest.approx(summary["final"]["val/loss"])
    assert stopped.startswith(f"stopped: early stopping at epoch {stop['epoch']} of 30 ")
    assert (
        f"val/loss {stop['value']:.4g}, no better than its best {stop['best']:.4g} "
        f"for {patience} evaluations" in stopped
    )
    best = summary["best_checkpoint"]
    assert best["value"] == pytest.approx(stop["best"]) and best["epoch"] < stop["epoch"]
    assert f", step {best['step']}, epoch {best['epoch']})" in weights


@pytest.mark.slow
def test_a_callbacks_stop_request(tmp_path):
    from tests.tasks_code import Recorder

    _, lines = fit_lines(["train.epochs=4", f"run.dir={tmp_path}"], callbacks=[Recorder(5)])
    stopped, _ = closing(lines)
    summary = read_summary(tmp_path)
    assert summary["stop"]["kind"] == "callback" and summary["stop"]["callback"] == "Recorder"
    assert stopped.startswith("stopped: callback Recorder asked to stop, at epoch 1 of 4")


@pytest.mark.slow
def test_without_validation_best_pt_is_by_the_training_loss(tmp_path):
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    net = nn.Sequential(nn.Linear(8, 3))
    result, lines = fit_lines(["train.epochs=2", f"run.dir={tmp_path}"], model=net,
                              train_data=TensorDataset(x, y))  # fmt: skip
    _, weights = closing(lines)
    best = read_summary(tmp_path)["best_checkpoint"]
    assert best["monitor"] == "train/loss"
    assert weights.startswith(f"weights: best.pt holds the best train/loss ({best['value']:.4g}")


def test_no_best_checkpoint_says_the_model_holds_the_last_weights():
    from types import SimpleNamespace

    from trainwell.engine.run.stop_report import weights_line

    trainer = SimpleNamespace(loop=SimpleNamespace(best={}, step=40), monitor="val/f1")
    line = weights_line(trainer, "last (step 40)")  # type: ignore[arg-type]
    assert line == (
        "weights: no best.pt (val/f1 never improved at an evaluation); "
        "FitResult.model holds the last weights (step 40), as last.pt does"
    )


class DataclassOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        from dataclasses import make_dataclass

        Output = make_dataclass("Output", ["logits", "hidden"])
        return Output(self.fc(x), x)


class DictOut(DataclassOut):
    def forward(self, x):
        return {"logits": self.fc(x), "features": x}


class TupleOut(DataclassOut):
    def forward(self, x):
        return self.fc(x), x


@pytest.mark.slow
@pytest.mark.parametrize(
    ("net", "shown", "pick"),
    [(DataclassOut(), "Output (logits, hidden)", "model(x).logits"),
     (DictOut(), "dict (logits, features)", "model(x)['logits']"),
     (TupleOut(), "tuple", "model(x)[0]")],
)  # fmt: skip
def test_outputs_the_default_step_cannot_use_name_train_step(tmp_path, net, shown, pick):
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    cfg = trainwell.load_config(overrides=[f"run.dir={tmp_path / 'run'}"])
    with pytest.raises(StepError) as caught:
        trainwell.fit(cfg, model=net, train_data=TensorDataset(x, y), console=Console(quiet=True))
    message = str(caught.value)
    assert message.startswith(f"train.step: the model returns {shown}, not a tensor")
    assert pick in message and "fit(step_fn=step)" in message
    assert "\n" not in message
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_loss_that_takes_the_outputs_as_they_are_is_left_alone(tmp_path):
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))

    def loss_fn(out, target):
        return nn.functional.cross_entropy(out["logits"], target)

    cfg = trainwell.load_config(overrides=["train.epochs=1", f"run.dir={tmp_path}"])
    result = trainwell.fit(cfg, model=DictOut(), train_data=TensorDataset(x, y), loss_fn=loss_fn,
                           console=Console(quiet=True))  # fmt: skip
    assert read_summary(result.run_dir)["status"] == "completed"


@pytest.mark.slow
def test_cli_one_line_exit_2_for_a_model_returning_a_dict(tmp_path, cli):
    (tmp_path / "hfish.py").write_text(
        textwrap.dedent("""
        import torch
        from torch import nn

        class Classifier(nn.Module):
            def __init__(self, num_classes=10, input_shape=(1, 8, 8)):
                super().__init__()
                self.fc = nn.Linear(64, num_classes)

            def forward(self, x):
                return {"logits": self.fc(x.flatten(1)), "loss": None}
    """)
    )
    # In-process (the cli fixture, from tmp_path): the refusal, not the process, is checked.
    code, _, err = cli("train", "model.name=hfish:Classifier", "run.dir=run")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "train.step: the model returns dict (logits, loss), not a tensor" in lines[0]
    assert not (tmp_path / "run").exists()
