"""Input at the edges (issue 11): values the config accepted and crashed on later, configs
that name standard-library code, exports onto their own input or of crafted checkpoints,
and a doctor --json path that could only fail after the whole script ran."""

from __future__ import annotations

import functools
import os
import stat
import sys

import pytest
import torch
from safetensors.torch import load_file

from tests.docs_pages import page
from trainwell.cli import main
from trainwell.config import load_config
from trainwell.data import DataConfig, build_data
from trainwell.data.synthetic import make_synthetic
from trainwell.engine.build.optim import OptimConfig
from trainwell.engine.build.train_config import TrainConfig
from trainwell.errors import UserError
from trainwell.imports import resolve
from trainwell.models import ModelConfig, build_model, mlp, simple_cnn


def one_line_error(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- (a) every numeric key has a checked range; non-finite values are refused ----------


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("optim.lr=.inf", "optim.lr: must be a finite number in (0, 10]; got inf"),
        ("optim.lr=1e308", "optim.lr: must be a finite number in (0, 10]; got 1e+308"),
        ("optim.lr=11", "optim.lr: must be a finite number in (0, 10]"),
        ("optim.eps=-1", "optim.eps: must be a finite number in (0, 1); got -1"),
        ("optim.eps=0", "optim.eps: must be a finite number in (0, 1)"),
        ("optim.weight_decay=.inf", "optim.weight_decay: must be a finite number in [0, 10)"),
        ("optim.momentum=1.5", "optim.momentum: must be a finite number in [0, 1)"),
        ("optim.momentum=.inf", "optim.momentum: must be a finite number in [0, 1)"),
        ("train.grad_clip=.inf", "train.grad_clip: must be a finite number >= 0; got inf"),
        ("early_stop.min_delta=.inf", "early_stop.min_delta: must be a finite number >= 0"),
        ("early_stop.min_delta=.nan", "early_stop.min_delta: must be a finite number >= 0"),
        ("train.epochs=4294967296", "train.epochs: must be at most 2147483648"),
        ("train.max_steps=4294967296", "train.max_steps: must be at most"),
        ("train.log_every=4294967296", "train.log_every: must be at most"),
        ("sched.warmup_steps=4294967296", "sched.warmup_steps: must be at most"),
        ("sched.step_size=4294967296", "sched.step_size: must be at most"),
        ("early_stop.patience=4294967296", "early_stop.patience: must be at most"),
        ("data.batch_size=4294967296", "data.batch_size: must be at most 2147483648"),
        ("data.eval_batch_size=4294967296", "data.eval_batch_size: must be at most"),
        ("data.num_workers=100000", "data.num_workers: must be at most"),
        ("data.num_classes=4294967296", "data.num_classes: must be at most"),
    ],
)
def test_out_of_range_config_values_are_one_clear_line(override, expected):
    message = one_line_error(load_config, overrides=[override])
    assert expected in message


def test_existing_messages_keep_their_words():
    # Other tests and users match these; the new checks only add an upper end.
    assert "train.epochs: must be positive; got 0" in one_line_error(
        load_config, overrides=["train.epochs=0"]
    )
    assert "sched.warmup_steps: must be >= 0; got -1" in one_line_error(
        load_config, overrides=["sched.warmup_steps=-1"]
    )


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda: OptimConfig(lr="0.1"), "optim.lr"),
        (lambda: OptimConfig(lr=True), "optim.lr"),
        (lambda: TrainConfig(epochs=2.5), "train.epochs"),
        (lambda: TrainConfig(grad_clip=float("inf")), "train.grad_clip"),
        (lambda: DataConfig(val_fraction="0.1"), "data.val_fraction"),
    ],
)
def test_configs_built_in_python_get_the_same_checks(build, key):
    # Refused with the key, not a TypeError from a comparison.
    assert one_line_error(build).startswith(f"{key}: ")


def test_an_infinite_learning_rate_no_longer_trains(cli):
    code, _, err = cli("train", "optim.lr=.inf", "--dry-run")
    assert code == 2
    assert err.strip() == (
        "trainwell: error: optim.lr: must be a finite number in (0, 10]; got inf"
    )


@pytest.mark.parametrize(
    ("factory", "kwargs", "expected"),
    [
        (mlp, {"hidden": [-4]}, "model.kwargs.hidden: must be positive; got -4"),
        (mlp, {"hidden": [0]}, "model.kwargs.hidden: must be positive; got 0"),
        (mlp, {"hidden": [3.5]}, "model.kwargs.hidden: must be an integer; got 3.5"),
        (mlp, {"hidden": 64}, "model.kwargs.hidden: mlp takes a list of layer widths"),
        (mlp, {"hidden": [2**30]}, "model.kwargs.hidden: must be at most"),
        (mlp, {"dropout": 1.5}, "model.kwargs.dropout: must be a finite number in [0, 1)"),
        (mlp, {"num_classes": 0}, "num_classes (model.kwargs or the data's): must be positive"),
        (simple_cnn, {"channels": [0, 8]}, "model.kwargs.channels: must be positive; got 0"),
        (simple_cnn, {"channels": [-8, 8]}, "model.kwargs.channels: must be positive"),
        (simple_cnn, {"channels": [8]}, "model.kwargs.channels: simple_cnn takes two conv"),
        (simple_cnn, {"hidden": -1}, "model.kwargs.hidden: must be positive; got -1"),
        (simple_cnn, {"dropout": -0.1}, "model.kwargs.dropout: must be a finite number"),
    ],
)
def test_builtin_models_refuse_bad_widths(factory, kwargs, expected):
    kwargs = {"num_classes": 10, **kwargs}
    assert expected in one_line_error(factory, input_shape=(1, 8, 8), **kwargs)


def test_negative_width_through_the_config_is_a_user_error():
    cfg = ModelConfig(name="mlp", kwargs={"hidden": [-4]})
    message = one_line_error(build_model, cfg, 10, (1, 8, 8))
    assert message == "model.kwargs.hidden: must be positive; got -4"


def test_negative_width_on_the_command_line_exits_2(cli):
    args = ["data.name=synthetic", "data.kwargs.num_samples=64", "data.kwargs.shape=[8]"]
    code, _, err = cli("train", *args, "model.name=mlp", "model.kwargs.hidden=[-4]", "--dry-run")
    assert code == 2
    assert err.strip() == "trainwell: error: model.kwargs.hidden: must be positive; got -4"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"num_samples": 2**40}, "data.kwargs: num_samples: must be at most"),
        ({"num_samples": True}, "data.kwargs: num_samples: must be an integer; got True"),
        ({"num_samples": 2**20, "shape": [2**12]}, "needs 4295008256 values; at most"),
        ({"num_classes": 2**40}, "data.kwargs: num_classes: must be at most"),
        ({"seed": 2**70}, "data.kwargs: seed: must be at most 18446744073709551615"),
        ({"seed": -1}, "data.kwargs: seed: must be >= 0; got -1"),
        ({"shape": ["a"]}, "data.kwargs: shape: must be an integer; got 'a'"),
    ],
)
def test_synthetic_data_sizes_are_checked_before_allocating(kwargs, expected):
    assert expected in one_line_error(make_synthetic, **kwargs)
    # Through the config as well, with the key the existing messages start with.
    message = one_line_error(build_data, DataConfig(name="synthetic", kwargs=kwargs))
    assert message.startswith("data.kwargs:")


# --- (b) a config runs the code it names: no standard-library callables -----------------

STDLIB_PATHS = [
    ("model.name", "os:system", "callable, not a model"),
    ("data.name", "subprocess:run", "callable, not a data set"),
    ("data.collate", "builtins:eval", "callable, not a collate function"),
    ("train.loss", "shutil:rmtree", "callable, not a loss"),
    ("train.step", "torch:os.system", "callable, not a step function"),
    ("train.eval_step", "collections:OrderedDict", "callable, not a step function"),
    ("model.name", "math:pi", "object, not a model"),
]


@pytest.mark.parametrize(("key", "path", "words"), STDLIB_PATHS)
def test_standard_library_paths_are_refused(key, path, words):
    message = one_line_error(resolve, path, key)
    assert message == (
        f"{key}: {path!r} is a standard-library {words}; configs are code: run only configs "
        "you trust; --safe for configs from elsewhere"
    )


def test_a_yaml_config_naming_os_system_runs_nothing(cli, tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "evil.yaml").write_text(
        f'model: {{name: "os:system", kwargs: {{command: "touch {marker}"}}}}\n'
        "data: {name: synthetic, kwargs: {num_samples: 64, shape: [1, 8, 8]}}\n"
    )
    code, _, err = cli("train", "--config", "evil.yaml", "--dry-run")
    assert code == 2
    assert err.strip() == (
        "trainwell: error: model.name: 'os:system' is a standard-library callable, not a "
        "model; configs are code: run only configs you trust; --safe for configs from elsewhere"
    )
    assert not marker.exists()


def test_user_modules_reexporting_the_standard_library_are_refused(tmp_path, monkeypatch):
    (tmp_path / "tw_reexports.py").write_text("import os\nfrom subprocess import Popen\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "standard-library" in one_line_error(resolve, "tw_reexports:os.system", "model.name")
    assert "standard-library" in one_line_error(resolve, "tw_reexports:Popen", "data.name")


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("optim.name", "torch.optim:RMSprop"),
        ("sched.name", "torch.optim.lr_scheduler:OneCycleLR"),
        ("train.loss", "torch.nn:MSELoss"),
        ("train.loss", "torch.nn.functional:cross_entropy"),
        ("model.name", "torch.nn:Linear"),
    ],
)
def test_torch_paths_still_resolve(key, path):
    assert callable(resolve(path, key))


def test_user_code_still_resolves_even_when_it_uses_the_standard_library(tmp_path, cli):
    # cli: runs in tmp_path, so a module there resolves as users' do; one named like a
    # standard module (test.py) is the user's own, found first in the working folder.
    (tmp_path / "tw_user_models.py").write_text(
        "import functools, os\nimport torch\n"
        "def make(num_classes=2, width=3):\n    return torch.nn.Linear(width, num_classes)\n"
        "make_wide = functools.partial(make, width=5)\n"
    )
    (tmp_path / "test.py").write_text("import torch\ndef Net():\n    return torch.nn.Linear(1, 1)")
    sys.modules.pop("test", None)
    try:
        assert resolve("tw_user_models:make", "model.name")().in_features == 3
        assert isinstance(resolve("tw_user_models:make_wide", "model.name"), functools.partial)
        assert resolve("test:Net", "model.name")().in_features == 1
    finally:
        sys.modules.pop("test", None)


def test_the_readme_says_a_config_runs_the_code_it_names():
    # The README's "Train your own model" section is its own page now.
    section = page("getting-started/your-own-model.md")
    assert "A config runs the code it names" in section


# --- (c) export never writes over its input; crafted checkpoints are one line ----------


@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / "ck.pt"
    torch.save({"model": {"w": torch.randn(3, 2), "b": torch.zeros(3)}}, path)
    return path


@pytest.mark.parametrize("spelling", ["ck.pt", "./sub/../ck.pt", "link.safetensors", "hard.pt"])
def test_export_onto_its_own_checkpoint_is_refused(cli, tmp_path, checkpoint, spelling):
    before = checkpoint.read_bytes()
    (tmp_path / "link.safetensors").symlink_to(checkpoint)
    os.link(checkpoint, tmp_path / "hard.pt")
    code, out, err = cli("export", "ck.pt", "--output", spelling)
    assert code == 2 and out == ""
    assert "is the checkpoint being exported" in err and len(err.strip().splitlines()) == 1
    assert checkpoint.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_export_onto_another_checkpoint_is_refused(cli, tmp_path, checkpoint):
    other = tmp_path / "last.pt"
    torch.save({"model": {}}, other)
    before = other.read_bytes()
    code, _, err = cli("export", "ck.pt", "--output", "last.pt")
    assert code == 2 and "would replace an existing checkpoint" in err
    assert other.read_bytes() == before


def test_exported_file_gets_the_umask_mode_and_no_temp_file(cli, tmp_path, checkpoint):
    old = os.umask(0o022)
    try:
        code, _, err = cli("export", "ck.pt", "--output", "w.safetensors")
    finally:
        os.umask(old)
    assert code == 0, err
    assert stat.S_IMODE((tmp_path / "w.safetensors").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.pt", "w.safetensors"]
    assert load_file(str(tmp_path / "w.safetensors")).keys() == {"w", "b"}


def test_a_plain_model_state_dict_exports(cli, tmp_path):
    torch.save({"model": torch.nn.Linear(2, 3).state_dict()}, tmp_path / "plain.pt")
    code, _, err = cli("export", "plain.pt")
    assert code == 0, err
    assert load_file(str(tmp_path / "plain.safetensors")).keys() == {"weight", "bias"}


def test_nan_weights_export_bit_for_bit(cli, tmp_path):
    # A diverged run's weights are what they are: the parity check compares bytes.
    torch.save({"model": {"w": torch.tensor([float("nan"), 1.0])}}, tmp_path / "nan.pt")
    code, _, err = cli("export", "nan.pt")
    assert code == 0, err


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"model": {"w": "hello"}}, "'model' entry 'w' is a str, not a tensor"),
        ({"model": {"w": 3}}, "'model' entry 'w' is a int, not a tensor"),
        ({"model": {"w": torch.eye(3).to_sparse()}}, "'w' is a sparse tensor"),
        ({"model": [torch.zeros(1)]}, "'model' is a list, not a state_dict"),
        ({"model": {1: torch.zeros(1)}}, "'model' has a key 1 (int)"),
        ({"model": {}}, "'model' holds no weights"),
        ({"model": {"w": torch.zeros(1)}, "config": torch.zeros(2)}, "its 'config' cannot"),
        ({"weights": {"w": torch.zeros(1)}}, "no 'model' state"),
    ],
)
def test_crafted_checkpoints_give_one_line_naming_the_file(cli, tmp_path, state, expected):
    torch.save(state, tmp_path / "crafted.pt")
    code, out, err = cli("export", "crafted.pt")
    assert code == 2 and out == ""
    assert err.startswith("trainwell: error: checkpoint crafted.pt")
    assert expected in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crafted.pt"]


# --- (d) doctor --json: the path is checked before the script runs ---------------------


@pytest.fixture
def marking_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    return script


def test_doctor_json_in_a_missing_folder_is_refused_before_the_script_runs(
    tmp_path, marking_script, capsys
):
    target = tmp_path / "missing" / "dir" / "x.json"
    code = main(["doctor", "--json", str(target), str(marking_script)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        f"trainwell: error: doctor: --json {target}: the folder {target.parent} does not exist"
    )
    assert not (tmp_path / "ran").exists()


def test_doctor_json_onto_a_folder_is_refused_before_the_script_runs(
    tmp_path, marking_script, capsys
):
    code = main(["doctor", "--json", str(tmp_path), str(marking_script)])
    assert code == 2 and "is a folder" in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()


def test_doctor_json_in_an_existing_folder_still_works(tmp_path, marking_script):
    assert main(["doctor", "--json", str(tmp_path / "f.json"), str(marking_script)]) == 0
    assert (tmp_path / "ran").exists() and (tmp_path / "f.json").exists()
