"""Config loading: YAML + overrides, strict validation with one-line errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from trainwell.config import Config, all_keys, load_config, reference_markdown, to_yaml
from trainwell.errors import UserError

REPO = Path(__file__).resolve().parents[3]


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_hold_the_design_keys():
    keys = set(all_keys())
    for key in [
        "run.dir", "run.name", "run.seed", "run.deterministic", "data.name", "data.batch_size",
        "data.num_workers", "model.name", "train.epochs", "train.max_steps",
        "train.grad_accum_steps", "train.grad_clip", "train.precision", "optim.name",
        "optim.lr", "optim.weight_decay", "sched.warmup_steps", "checkpoint.every_steps",
        "checkpoint.keep_last", "doctor.enabled",
    ]:  # fmt: skip
        assert key in keys, key
    cfg = load_config()
    assert cfg.data.name == "digits" and cfg.model.name == "simple_cnn"
    assert cfg.optim.name == "adamw" and cfg.train.precision == "auto"


def test_yaml_then_overrides_with_types(tmp_path):
    path = write(
        tmp_path,
        "optim: {lr: 0.1, name: sgd}\ntrain: {epochs: 3}\nmodel: {kwargs: {hidden: [8, 4]}}\n",
    )
    cfg = load_config(path, ["optim.lr=1e-3", "run.deterministic=true", "model.kwargs.dropout=0.5"])
    assert cfg.optim.name == "sgd"
    assert cfg.optim.lr == 0.001 and isinstance(cfg.optim.lr, float)
    assert cfg.train.epochs == 3 and cfg.run.deterministic is True
    assert cfg.model.kwargs == {"hidden": [8, 4], "dropout": 0.5}
    assert load_config(overrides=["train.epochs='7'"]).train.epochs == 7
    assert load_config(overrides=["data.num_classes=null"]).data.num_classes is None


def test_resolved_yaml_round_trips(tmp_path):
    cfg = load_config(overrides=["optim.lr=0.02", "model.kwargs.hidden=[3]", "run.name=x"])
    again = load_config(write(tmp_path, to_yaml(cfg)))
    assert dataclasses.asdict(again) == dataclasses.asdict(cfg)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["optim.learning_rate=1"], "unknown config key 'optim.learning_rate'"),
        (["trian.epochs=1"], "did you mean train.epochs"),
        (["optim.lrr=1"], "did you mean optim.lr"),
        (["optim.lr.x=1"], "unknown config key 'optim.lr.x'"),
        (["optim=1"], "names a section"),
        (["train.epochs"], "is not KEY=VALUE"),
        (["train.epochs=abc"], "train.epochs: expected an int, got 'abc'"),
        (["train.epochs=2.5"], "train.epochs: expected an int, got '2.5'"),
        (["optim.lr=fast"], "optim.lr: expected a number, got 'fast'"),
        (["run.deterministic=maybe"], "run.deterministic: expected true or false"),
        (["data.num_classes=x"], "data.num_classes: expected an int or null"),
        (["train.epochs=0"], "train.epochs: must be positive; got 0"),
        (["optim.name=rmsprop"], "optim.name: expected one of adamw, adam, sgd"),
        (["train.precision=fp8"], "train.precision: expected one of auto, fp32, bf16, fp16"),
        (["data.batch_size=10", "train.grad_accum_steps=3"], "does not divide"),
        (["train.max_steps=5", "sched.warmup_steps=5"], "sched.warmup_steps: 5 warmup steps"),
        (["run.name=a/b"], "run.name"),
        (["run.name=.."], "run.name"),
        (["run.name=a\x07b"], "run.name"),
        (["model.name=resnet"], "model.name: unknown model 'resnet'"),
        (["data.name=imagenet"], "data.name: unknown data set 'imagenet'"),
        (["run.device=tpu"], "run.device"),
    ],
)
def test_bad_overrides_give_one_clear_line(overrides, expected):
    with pytest.raises(UserError) as info:
        load_config(overrides=overrides)
    message = str(info.value)
    assert expected in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- a\n- b\n", "must hold a mapping of sections"),
        ("just a string\n", "must hold a mapping of sections"),
        ("optim: 3\n", "config section 'optim' must be a mapping"),
        ("optim: {learning_rate: 1}\n", "unknown config key 'optim.learning_rate'"),
        ("optimizer: {lr: 1}\n", "unknown config key 'optimizer'; did you mean optim"),
        ("train: {epochs: [1]}\n", "train.epochs: expected an int"),
        ("train: {epochs: 3\n", "is not valid YAML"),
    ],
)
def test_bad_yaml_files(tmp_path, text, expected):
    with pytest.raises(UserError) as info:
        load_config(write(tmp_path, text))
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_python_tags_are_refused_and_never_run(tmp_path):
    marker = tmp_path / "pwned"
    path = write(tmp_path, f"run: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(UserError, match="tag that safe YAML refuses"):
        load_config(path)
    assert not marker.exists()


def test_missing_and_unreadable_config(tmp_path):
    with pytest.raises(UserError, match=r"config file .*nope.yaml does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(UserError, match="cannot be read"):
        load_config(tmp_path)  # a folder, not a file
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UserError):
        load_config(binary)


def test_empty_yaml_is_the_defaults(tmp_path):
    assert dataclasses.asdict(load_config(write(tmp_path, ""))) == dataclasses.asdict(Config())


def test_readme_config_reference_is_current():
    readme = (REPO / "docs" / "config.md").read_text()
    assert reference_markdown() in readme, "run: python scripts/update_docs.py"
    for key in all_keys():
        assert f"`{key}`" in readme
