"""The command line: bad input is one clear line and exit code 2, and nothing looks done."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.conftest import completed_runs, read_summary, run_subprocess

USER_CODE = textwrap.dedent(
    """
    import torch
    from torch.utils.data import Dataset, TensorDataset

    def empty():
        return TensorDataset(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long))

    def twelve_classes(n=120):
        return TensorDataset(torch.randn(n, 4), torch.arange(n) % 12)

    class NoTargets(Dataset):
        # No .targets: labels can only be seen batch by batch.
        def __len__(self):
            return 64
        def __getitem__(self, i):
            return torch.randn(4), torch.tensor(11 if i == 40 else i % 3)

    def small(n=50):
        return TensorDataset(torch.randn(n, 4), torch.arange(n) % 3)

    def not_a_module(**kwargs):
        return "a string"
    """
)


@pytest.fixture
def user_code(tmp_path):
    (tmp_path / "usercode.py").write_text(USER_CODE)
    return tmp_path


def assert_refused(code: int, err: str, expected: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("trainwell: error: ")
    assert expected in lines[0], lines[0]


QUICK = ["train.epochs=1", "run.dir=run"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--config", "missing.yaml"], "config file missing.yaml does not exist"),
        (["optim.learning_rate=1"], "unknown config key 'optim.learning_rate'"),
        (["train.epochs=ten"], "train.epochs: expected an int, got 'ten'"),
        (["model.name=nowhere.models:Net"], "model.name: cannot import module 'nowhere.models'"),
        (["model.name=usercode:Missing"], "model.name: module 'usercode' has no attribute"),
        (["model.name=usercode:not_a_module"], "returned str, not an nn.Module"),
        (["model.name=mlp", "model.kwargs.widht=3"], "model.kwargs: cannot call mlp"),
        (["data.name=usercode:empty"], "the train split of 'usercode:empty' is empty"),
        (
            ["data.name=usercode:twelve_classes", "model.name=mlp", "model.kwargs.num_classes=10"],
            "labels out of range",
        ),
        (
            ["data.name=usercode:small", "model.name=mlp", "data.batch_size=64"],
            "larger than the training data",
        ),
        (["data.name=usercode:small"], "simple_cnn needs images shaped (C, H, W)"),
        (["data.name=fashion_mnist", "data.root=nowhere"], "nowhere"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(cli, user_code, args, expected):
    code, _out, err = cli("train", *QUICK, *args)
    assert_refused(code, err, expected)
    # Refused before the run started: no run directory at all.
    assert not (user_code / "run").exists()
    assert not (user_code / "runs").exists()


@pytest.mark.slow
def test_bad_config_files(cli, tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    code, _, err = cli("train", "--config", "list.yaml")
    assert_refused(code, err, "must hold a mapping")
    (tmp_path / "tag.yaml").write_text("run: !!python/name:os.system\n")
    code, _, err = cli("train", "--config", "tag.yaml")
    assert_refused(code, err, "tag that safe YAML refuses")


@pytest.mark.slow
def test_label_error_found_mid_run_marks_the_run_failed(cli, user_code):
    args = ["data.name=usercode:NoTargets", "model.name=mlp", "data.num_classes=3"]
    code, _out, err = cli("train", *QUICK, *args, "data.batch_size=8")
    assert_refused(code, err, "labels out of range")
    assert read_summary(user_code / "run")["status"] == "failed"
    assert completed_runs(user_code) == []


@pytest.mark.slow
def test_completed_run_is_never_overwritten(cli, tmp_path):
    assert cli("train", *QUICK)[0] == 0
    before = (tmp_path / "run" / "summary.json").read_bytes()
    code, _, err = cli("train", *QUICK)
    assert_refused(code, err, "already holds a completed run")
    assert (tmp_path / "run" / "summary.json").read_bytes() == before


@pytest.mark.slow
def test_debug_shows_the_traceback(cli):
    from trainwell.errors import UserError

    with pytest.raises(UserError):
        cli("--debug", "train", "optim.lrr=1")


@pytest.mark.slow
def test_dry_run_writes_nothing(cli, tmp_path):
    code, out, _ = cli("train", "--dry-run", "run.dir=run")
    assert code == 0
    assert "dry run" in out and "parameters" in out and "(64, 1, 8, 8)" in out
    assert "outputs      (64, 10)" in out
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_print_and_help_config(cli):
    code, out, _ = cli("train", "--print-config", "optim.lr=0.5")
    assert code == 0 and "lr: 0.5" in out
    code, out, _ = cli("train", "--help-config")
    assert code == 0 and "`optim.lr`" in out


@pytest.mark.slow
def test_env_json_and_report(tmp_path):
    proc = run_subprocess(["env", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["torch"]["version"].startswith("2.")
    proc = run_subprocess(["env"], cwd=tmp_path)
    assert proc.returncode == 0 and "torch" in proc.stdout


@pytest.mark.slow
def test_real_process_exit_code_and_one_line(tmp_path):
    proc = run_subprocess(["train", "optim.lrr=1"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "trainwell: error: unknown config key 'optim.lrr'; did you mean optim.lr?"
    )
