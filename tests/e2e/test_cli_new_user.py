"""The command line as a new user meets it: overrides anywhere, whole lines in logs, and
clear words for a file that is not a checkpoint."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import SYNTHETIC, read_summary

QUICK = [*SYNTHETIC, "train.epochs=1", "train.precision=fp32", "doctor.enabled=false"]


def test_overrides_stand_anywhere_on_the_line(cli, capsys):
    code, out, err = cli("train", "train.epochs=1", "--dry-run", "train.max_steps=2", *QUICK)
    assert code == 0, err
    assert "2 optimizer steps" in out
    with pytest.raises(SystemExit) as info:  # argparse's own exit for a bad line
        cli("train", "--dry-run", *QUICK, "--no-such-flag")
    assert info.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


@pytest.mark.slow
def test_lines_are_never_wrapped_without_a_terminal(cli, tmp_path):
    deep = tmp_path / ("a-rather-long-folder-name-" * 4) / "run"
    code, out, err = cli("train", *QUICK, f"run.dir={deep}", "train.max_steps=3")
    assert code == 0, err
    assert f"run directory: {deep}\n" in out
    assert read_summary(deep)["status"] == "completed"


@pytest.mark.parametrize(
    "content",
    [b"\x80\x04\x95garbage that is no pickle at all" * 5, b"not even close", b"PK\x03\x04junk"],
)
def test_a_file_that_is_not_a_checkpoint_is_named_without_unsafe_advice(cli, tmp_path, content):
    (tmp_path / "garbage.pt").write_bytes(content)
    code, _, err = cli("train", *QUICK, "--resume", "garbage.pt")
    assert code == 2
    assert "checkpoint garbage.pt" in err
    assert "not a trainwell checkpoint" in err or "truncated or not a checkpoint" in err
    assert "weights_only" not in err and len(err.strip().splitlines()) == 1


def test_a_pickle_of_objects_is_refused(cli, tmp_path):
    torch.save({"model": torch.nn.Linear(2, 2)}, tmp_path / "module.pt")  # a pickled module
    code, _, err = cli("train", *QUICK, "--resume", "module.pt")
    assert code == 2 and "refusing to load it" in err and "weights_only" not in err
