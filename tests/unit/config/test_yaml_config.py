"""Config YAML: duplicate keys, alias bombs, deep nesting and long names are one line;
large configs load in about a second per MB; ``${oc.env:VAR}`` values are never written."""

from __future__ import annotations

import cProfile
import os
import pstats
import subprocess
import sys
from pathlib import Path

import pytest

from trainwell.config import load_config, to_dict, to_yaml
from trainwell.errors import UserError

ROOT = Path(__file__).resolve().parents[3]


def _write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text,key,line,first",
    [
        ("optim:\n  lr: 0.1\n  lr: 0.2\n", "lr", 3, 2),
        ("optim:\n  lr: 0.1\noptim:\n  weight_decay: 0.0\n", "optim", 3, 1),
        ("model:\n  kwargs:\n    hidden: 3\n    depth: 2\n    hidden: 4\n", "hidden", 5, 3),
        ("train: {epochs: 1, epochs: 2}\n", "epochs", 1, 1),
        ("callbacks:\n  - name: a:B\n    kwargs: {x: 1}\n    name: c:D\n", "name", 4, 2),
    ],
)
def test_duplicate_keys_are_refused_naming_key_and_line(tmp_path, text, key, line, first):
    with pytest.raises(UserError) as info:
        load_config(_write(tmp_path, text))
    message = str(info.value)
    assert f"duplicate key {key!r} at line {line}" in message
    assert f"first at line {first}" in message
    assert "\n" not in message


def test_merge_keys_and_equal_keys_in_different_mappings_are_fine(tmp_path):
    text = (
        "model:\n  name: mlp\n  kwargs: &base\n    hidden: [8]\n"
        "data:\n  name: synthetic\n  kwargs:\n    <<: *base\n    n: 64\n"
    )
    cfg = load_config(_write(tmp_path, text))
    assert cfg.model.kwargs == {"hidden": [8]}
    assert cfg.data.kwargs == {"hidden": [8], "n": 64}


def _laughs(levels: int, width: int) -> str:
    lines = ["model:", "  kwargs:", '    l0: &l0 ["lol"]']
    for i in range(1, levels):
        refs = ", ".join([f"*l{i - 1}"] * width)
        lines.append(f"    l{i}: &l{i} [{refs}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels,width", [(9, 10), (12, 6), (30, 2), (5, 40)])
def test_alias_bombs_are_refused_fast(tmp_path, levels, width):
    text = _laughs(levels, width)
    assert len(text) < 1400
    path = _write(tmp_path, text)
    # Counted work, not wall time: the refusal costs what loading any config costs (about
    # 90k Python calls), nowhere near the 10**9 values the aliases would expand to.
    profile = cProfile.Profile()
    with pytest.raises(UserError, match="aliases .* expand to more than"):
        profile.runcall(load_config, path)
    assert pstats.Stats(profile).total_calls < 500_000


def test_a_few_shared_anchors_still_load(tmp_path):
    cfg = load_config(_write(tmp_path, _laughs(4, 3)))
    assert len(cfg.model.kwargs["l3"]) == 3


def test_a_recursive_alias_is_one_line(tmp_path):
    with pytest.raises(UserError, match="refers to a block that holds it"):
        load_config(_write(tmp_path, "model:\n  kwargs: &a\n    self: *a\n"))


@pytest.mark.parametrize("depth", [150, 999, 2000])
def test_deeply_nested_values_in_a_file_are_one_line(tmp_path, depth):
    text = "model:\n  kwargs:\n    x: " + "[" * depth + "]" * depth + "\n"
    with pytest.raises(UserError) as info:
        load_config(_write(tmp_path, text))
    assert "\n" not in str(info.value) and "deep" in str(info.value)


@pytest.mark.parametrize(
    "override",
    [
        ".".join(["a"] * 2000) + "=1",
        "model.kwargs." + ".".join(["a"] * 2000) + "=1",
        "model.kwargs." + ".".join(["b"] * 300) + "=x",
        "model.kwargs.x=" + "[" * 2000 + "]" * 2000,
        "model.kwargs.x=" + "[" * 400 + "]" * 400,
        "model.kwargs.x=" + "{a: " * 300 + "1" + "}" * 300,
    ],
)
def test_deep_overrides_are_one_short_line(override):
    with pytest.raises(UserError) as info:
        load_config(overrides=[override])
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message[:500]


@pytest.mark.slow
def test_deep_override_from_the_command_line_exits_2(tmp_path):
    key = "model.kwargs." + ".".join(["a"] * 2000)
    done = subprocess.run(
        [sys.executable, "-m", "trainwell", "train", "--dry-run", f"{key}=1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["n" * 300, "é" * 120, "x" * 201])
def test_a_name_too_long_for_a_folder_is_one_line(name):
    with pytest.raises(UserError, match="run.name: .*shorten it or set run.dir"):
        load_config(overrides=[f"run.name={name}"])
    # With run.dir the name does not name a folder.
    assert load_config(overrides=[f"run.name={name}", "run.dir=somewhere"]).run.name == name


def _big(kind: str, size: int = 1_000_000) -> str:
    lines = ["model:", "  name: mlp", "  kwargs:", f"    {kind}:"]
    i = 0
    total = 0
    while total < size:
        line = f"    - word_{i:07d}" if kind == "words" else f"      key_{i:07d}: {i}"
        lines.append(line)
        total += len(line) + 1
        i += 1
    return "\n".join(lines) + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["words", "table"])
def test_a_megabyte_config_loads_and_writes_in_seconds(tmp_path, kind):
    path = _write(tmp_path, _big(kind))
    # Counted work, not wall time (a loaded machine slows both sides): Python calls per
    # entry of the block. Today about 45 (a list) and 97 (a mapping) to load, 29 and 45 to
    # write; OmegaConf's nodes, which took 16-21 s to load and ~18 s to write here, cost
    # 280-390 calls an entry just to create.
    profile = cProfile.Profile()
    cfg = profile.runcall(load_config, path, overrides=["model.kwargs.extra=1"])
    loaded = pstats.Stats(profile).total_calls
    profile = cProfile.Profile()
    text = profile.runcall(to_yaml, cfg)
    written = pstats.Stats(profile).total_calls
    entries = len(cfg.model.kwargs[kind])
    assert loaded < 150 * entries and written < 100 * entries, (loaded, written, entries)
    assert cfg.model.kwargs["extra"] == 1
    assert entries > 40_000
    again = load_config(_write(tmp_path, text, "again.yaml"))
    assert to_dict(again) == to_dict(cfg)


def test_a_big_kwargs_block_is_still_checked(tmp_path):
    # Bypassing OmegaConf must not bypass the section's own checks.
    text = "train:\n  step_kwargs:\n" + "".join(f"    k{i}: {i}\n" for i in range(3000))
    with pytest.raises(UserError, match="train.step"):
        load_config(_write(tmp_path, text))


# ${oc.env:VAR}: the run uses the value; nothing written holds it.
TOKEN = "tok-" + "9f3ac2e1b7d4"

CALLBACK = """
class UsesToken:
    def __init__(self, token, url):
        assert token == "{token}", token
        assert url == "https://u:{token}@host/x", url

    def on_fit_end(self, *args, **kwargs):
        print("callback saw the token")
"""


@pytest.mark.slow
def test_env_values_are_used_but_never_written(tmp_path, cli, monkeypatch):
    (tmp_path / "tokcb.py").write_text(CALLBACK.replace("{token}", TOKEN))
    config = _write(
        tmp_path,
        "callbacks:\n"
        "  - name: tokcb:UsesToken\n"
        "    kwargs:\n"
        "      token: ${oc.env:TW_TEST_TOKEN}\n"
        "      url: https://u:${oc.env:TW_TEST_TOKEN}@host/x\n"
        "model:\n"
        "  kwargs:\n"
        "    channels: [4, 8]\n"
        "log:\n"
        "  tensorboard: true\n"
        "  mlflow: true\n"
        f"  mlflow_uri: sqlite:///{tmp_path}/mlflow/db.sqlite\n"
        "data:\n"
        "  name: digits\n"
        "run:\n"
        "  seed: ${oc.env:TW_TEST_SEED}\n",
    )
    monkeypatch.setenv("TW_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("TW_TEST_SEED", "7")
    code, out, err = cli("train", "--config", str(config), "train.max_steps=2", "run.dir=run")
    assert code == 0, err
    assert "callback saw the token" in out
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    files += [p for p in (tmp_path / "mlflow").rglob("*") if p.is_file()]
    assert len(files) > 5 and any(p.suffix == ".sqlite" for p in files)
    for path in files:
        assert TOKEN.encode() not in path.read_bytes(), path
        assert TOKEN not in str(path)
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "token: ${oc.env:TW_TEST_TOKEN}" in saved
    assert "seed: ${oc.env:TW_TEST_SEED}" in saved


def test_env_forms_in_to_dict_and_to_yaml(monkeypatch):
    monkeypatch.setenv("TW_SECRET_A", "s3cr3t-value")
    monkeypatch.setenv("TW_EPOCHS", "3")
    cfg = load_config(
        overrides=[
            "model.kwargs.key=${oc.env:TW_SECRET_A}",
            "train.epochs=${oc.env:TW_EPOCHS}",
            "data.kwargs.copy=${model.kwargs.key}",
            "log.mlflow_experiment=${oc.env:TW_UNSET_VAR,fallback}",
        ]
    )
    assert cfg.model.kwargs["key"] == "s3cr3t-value" and cfg.train.epochs == 3
    assert cfg.data.kwargs["copy"] == "s3cr3t-value"
    for text in (to_yaml(cfg), repr(to_dict(cfg))):
        assert "s3cr3t-value" not in text
        assert "${oc.env:TW_SECRET_A}" in text and "${model.kwargs.key}" in text
    # What was written reads back, with the environment, to the same run.
    assert load_config(overrides=[]).train.epochs != 3


def test_env_in_run_name_is_refused(monkeypatch):
    monkeypatch.setenv("TW_SECRET_B", "abc")
    with pytest.raises(UserError, match="run.name: .*oc.env"):
        load_config(overrides=["run.name=${oc.env:TW_SECRET_B}"])
    with pytest.raises(UserError, match="run.name"):
        load_config(
            overrides=["model.kwargs.t=${oc.env:TW_SECRET_B}", "run.name=${model.kwargs.t}"]
        )
