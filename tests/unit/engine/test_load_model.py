"""Deploying what ``fit(model=obj)`` trained: the run records how to rebuild the model,
``trainwell export`` / ``predict`` use the record, and ``trainwell.load_model`` loads any
run in Python; where no record can be made, the run and export/predict say why."""

from __future__ import annotations

import functools
import sys
import textwrap

import numpy as np
import pytest
import torch
from rich.console import Console
from torch import nn

import trainwell

QUIET = Console(quiet=True)

NETS = '''
import torch
from torch import nn


class Net(nn.Module):
    """Keeps its arguments as attributes, nested ones included."""

    def __init__(self, sizes=(6, 16), num_classes=3, extra={"depth": 1, "dims": (4, 2)},
                 act="relu"):
        super().__init__()
        self.sizes, self.num_classes, self.extra, self.act = sizes, num_classes, extra, act
        layers = [nn.Linear(sizes[0], sizes[1]), nn.ReLU() if act == "relu" else nn.Tanh()]
        for _ in range(extra["depth"]):
            layers += [nn.Linear(sizes[1], sizes[1]), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(sizes[1], num_classes)

    def forward(self, x):
        return self.head(self.body(x))


class Wrapper(nn.Module):
    """Takes modules as arguments."""

    def __init__(self, backbone, head, scale=1.0):
        super().__init__()
        self.backbone, self.head, self.scale = backbone, head, scale

    def forward(self, x):
        return self.head(self.backbone(x)) * self.scale


class Forgets(nn.Module):
    """Does not keep `hidden`: the record cannot be proven."""

    def __init__(self, hidden=8):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(6, hidden), nn.ReLU(), nn.Linear(hidden, 3))

    def forward(self, x):
        return self.fc(x)


def make_mlp(width=12, classes=3):
    return nn.Sequential(nn.Linear(6, width), nn.LayerNorm(width), nn.GELU(),
                         nn.Dropout(0.1), nn.Linear(width, classes))


def make_data(n=192, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return torch.utils.data.TensorDataset(x, y)
'''


@pytest.fixture
def nets(tmp_path, monkeypatch):
    (tmp_path / "nets.py").write_text(textwrap.dedent(NETS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("nets", None)
    import nets

    yield nets
    sys.modules.pop("nets", None)


def train(nets, model, run, epochs=1, **kw):
    cfg = trainwell.load_config(overrides=[f"train.epochs={epochs}", "data.batch_size=32",
                                           "train.precision=fp32", f"run.dir={run}"])  # fmt: skip
    return trainwell.fit(cfg, model=model, train_data=nets.make_data(), val_data=nets.make_data(
        64, 1), console=QUIET, **kw)  # fmt: skip


def best_weights(run):
    return torch.load(run / "checkpoints" / "best.pt", weights_only=True)["model"]


def same_weights(model, weights):
    state = model.state_dict()
    return state.keys() == weights.keys() and all(torch.equal(state[k], weights[k]) for k in state)


def variants(nets):
    return {
        "nested kwargs": lambda: nets.Net(sizes=(6, 10), num_classes=3,
                                          extra={"depth": 2, "dims": (5, (1, 2))}, act="tanh"),
        "factory": lambda: nets.make_mlp(width=9),
        "inline Sequential": lambda: nn.Sequential(nn.Linear(6, 7), nn.ReLU(),
                                                   nn.Linear(7, 3, bias=False)),
        "module arguments": lambda: nets.Wrapper(nn.Sequential(nn.Linear(6, 5), nn.Tanh()),
                                                 nn.Linear(5, 3), scale=0.5),
    }  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["nested kwargs", "factory", "inline Sequential", "module arguments"]
)
def test_load_model_rebuilds_every_variant_from_its_record(nets, tmp_path, name):
    model = variants(nets)[name]()
    result = train(nets, model, tmp_path / "run")
    loaded = trainwell.load_model(result.run_dir)
    assert type(loaded) is type(model) and not loaded.training
    assert repr(loaded) == repr(model)
    assert same_weights(loaded, best_weights(result.run_dir))
    x = nets.make_data(8, 5).tensors[0]
    result.model.eval()
    with torch.no_grad():
        assert torch.allclose(loaded(x), result.model(x))
    # A checkpoint file loads the same way.
    again = trainwell.load_model(result.run_dir / "checkpoints" / "last.pt")
    assert repr(again) == repr(model)


@pytest.mark.slow
def test_export_and_predict_a_fit_model_from_the_cli(nets, tmp_path, cli):
    model = variants(nets)["nested kwargs"]()
    run = train(nets, model, tmp_path / "run").run_dir
    code, out, err = cli("export", str(run), "--format", "onnx")
    assert code == 0, err
    assert "batch  32" in out and "ok" in out and (run / "checkpoints" / "best.onnx").is_file()
    x = nets.make_data(5, 7).tensors[0].numpy()
    np.save(tmp_path / "x.npy", x)
    code, out_run, err = cli("predict", str(run), "x.npy", "--out", "run.csv")
    assert code == 0, err
    code, out_onnx, err = cli("predict", str(run / "checkpoints" / "best.onnx"), "x.npy",
                              "--out", "onnx.csv")  # fmt: skip
    assert code == 0, err
    # The run, its ONNX file and the model in Python give the same classes.
    loaded = trainwell.load_model(run)
    with torch.no_grad():
        expected = loaded(torch.from_numpy(x)).argmax(1).tolist()
    for csv in ("run.csv", "onnx.csv"):
        rows = (tmp_path / csv).read_text().splitlines()[1:]
        assert [int(r.split(",")[-1]) for r in rows] == expected, csv
    # The data was passed to fit(): --split has nothing to read, and says so.
    code, _, err = cli("predict", str(run), "--split", "val")
    assert code == 2 and "data passed to fit(train_data=...)" in err


@pytest.mark.slow
@pytest.mark.parametrize("name", ["factory", "module arguments"])
def test_torchscript_export_of_other_variants(nets, tmp_path, cli, name):
    run = train(nets, variants(nets)[name](), tmp_path / "run").run_dir
    code, out, err = cli("export", str(run), "--format", "torchscript")
    assert code == 0, err
    assert "the model code changed" not in out + err


MAIN_SCRIPT = """
import sys
import torch
import trainwell
from torch import nn
from torch.utils.data import TensorDataset


class MainNet(nn.Module):
    def __init__(self, hidden=8):
        super().__init__()
        self.hidden = hidden
        self.fc = nn.Sequential(nn.Linear(6, hidden), nn.ReLU(), nn.Linear(hidden, 3))

    def forward(self, x):
        return self.fc(x)


torch.manual_seed(0)
x = torch.randn(128, 6)
y = (x[:, 0] > 0).long()
cfg = trainwell.load_config(overrides=["train.epochs=1", "data.batch_size=32", "run.dir=run"])
trainwell.fit(cfg, model=MainNet(16), train_data=TensorDataset(x, y))
"""


@pytest.mark.slow
def test_a_class_in_main_is_said_at_the_start_and_by_export_and_predict(tmp_path, cli):
    (tmp_path / "train.py").write_text(textwrap.dedent(MAIN_SCRIPT))
    import subprocess

    from tests.conftest import REPO

    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    start = [i for i, line in enumerate(lines) if "cannot be rebuilt" in line]
    run_line = next(i for i, line in enumerate(lines) if line.startswith("trainwell run "))
    assert len(start) == 1 and start[0] < run_line, proc.stdout  # at the start: before the run
    assert "class MainNet is defined in __main__" in lines[start[0]]
    assert "trainwell.load_model('RUN', model=MainNet(...))" in lines[start[0]]
    reason = ("run: the model was passed to fit() and cannot be rebuilt from the run: class "
              "MainNet is defined in __main__ (the script being run), which cannot be imported "
              "again; move it into a module. Load it in Python: "
              "trainwell.load_model('run', model=MainNet(...))")  # fmt: skip
    # The script's run is a real process (its __main__); export and predict read the run
    # it left, in-process (the cli fixture, from tmp_path).
    for args in (["export", "run", "--format", "onnx"], ["predict", "run", "x.npy"]):
        np.save(tmp_path / "x.npy", np.zeros((2, 6), dtype=np.float32))
        code, out, err = cli(*args)
        assert code == 2, out
        assert err.strip() == f"trainwell: error: {reason}", err
    assert not (tmp_path / "run" / "checkpoints" / "best.onnx").exists()

    # The Python way works, with the same class re-declared here.
    class MainNet(nn.Module):
        def __init__(self, hidden=8):
            super().__init__()
            self.fc = nn.Sequential(nn.Linear(6, hidden), nn.ReLU(), nn.Linear(hidden, 3))

        def forward(self, x):
            return self.fc(x)

    weights = best_weights(tmp_path / "run")
    for given in (MainNet(16), functools.partial(MainNet, 16)):
        loaded = trainwell.load_model(tmp_path / "run", model=given)
        assert not loaded.training and same_weights(loaded, weights)
    with pytest.raises(trainwell.UserError, match=r"fc.0.weight is \(16, 6\) in the checkpoint"):
        trainwell.load_model(tmp_path / "run", model=MainNet(8))


@pytest.mark.slow
def test_other_models_that_cannot_be_recorded_say_why(nets, tmp_path):
    def local():
        class Local(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(6, 3)

            def forward(self, x):
                return self.fc(x)

        return Local()

    cases = {
        "local": (local(), "local.Local is defined inside a function"),
        "forgets": (nets.Forgets(hidden=24), "taken at their defaults: Forgets.hidden"),
    }
    for name, (model, reason) in cases.items():
        run = tmp_path / name
        out = __import__("io").StringIO()
        cfg = trainwell.load_config(overrides=["train.epochs=1", f"run.dir={run}"])
        trainwell.fit(cfg, model=model, train_data=nets.make_data(),
                      console=Console(file=out, soft_wrap=True))  # fmt: skip
        said = [line for line in out.getvalue().splitlines() if "cannot be rebuilt" in line]
        assert len(said) == 1 and reason in said[0], out.getvalue()
        with pytest.raises(trainwell.UserError, match="cannot be rebuilt from the run") as caught:
            trainwell.load_model(run)
        assert reason in str(caught.value) and "trainwell.load_model(" in str(caught.value)
        # The object itself is the way back.
        assert same_weights(trainwell.load_model(run, model=model), best_weights(run))


@pytest.mark.slow
def test_a_run_from_before_the_record_names_the_python_way(nets, tmp_path):
    run = train(nets, nets.make_mlp(5), tmp_path / "run").run_dir
    path = run / "checkpoints" / "best.pt"
    state = torch.load(path, weights_only=True)
    del state["model_record"]
    torch.save(state, path)
    with pytest.raises(trainwell.UserError) as caught:
        trainwell.load_model(run)
    assert "weights do not fit the model 'simple_cnn' builds" in str(caught.value)
    assert "trainwell.load_model(" in str(caught.value)
    assert same_weights(trainwell.load_model(run, model=nets.make_mlp(5)), state["model"])


@pytest.mark.slow
def test_resume_of_a_fit_model_run_reports_no_config_change(nets, tmp_path):
    out = __import__("io").StringIO()
    train(nets, nets.Net(), tmp_path / "run", epochs=1)
    cfg = trainwell.load_config(
        overrides=[
            "train.epochs=2",
            "data.batch_size=32",
            "train.precision=fp32",
            f"run.dir={tmp_path / 'run'}",
        ]
    )
    trainwell.fit(cfg, model=nets.Net(), train_data=nets.make_data(), resume="auto",
                  console=Console(file=out))  # fmt: skip
    changed = [line for line in out.getvalue().splitlines() if "config changed" in line]
    assert "resuming from" in out.getvalue()
    assert changed and all("train.epochs" in line for line in changed), changed
    assert repr(trainwell.load_model(tmp_path / "run")) == repr(nets.Net())


def test_bad_model_argument():
    with pytest.raises(trainwell.UserError, match="model= is a str"):
        trainwell.load_model(".", model="nets:Net")  # type: ignore[arg-type]
