"""Every verb that writes a file the user names refuses, in one line with exit code 2 and
before any work, an output that is one of its inputs or one of a run directory's own
files; nothing of the run changes. Allowed outputs still work."""

from __future__ import annotations

import os

import numpy as np
import pytest

import trainwell
from trainwell.config import load_config

SMALL = ["data.name=synthetic", "data.kwargs.num_samples=96", "data.kwargs.shape=[8]",
         "model.name=mlp", "model.kwargs.hidden=[8]", "train.max_steps=2"]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("outputs")
    trainwell.fit(load_config(overrides=[*SMALL, f"run.dir={root / 'run'}"]))
    (root / "run" / "tensorboard").mkdir()
    return root / "run"


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def refused(result, *expected: str) -> None:
    code, out, err = result
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainwell: error: "), err
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.fixture
def x_npy(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.zeros((3, 8), dtype=np.float32))
    return path


RUN_FILES = ["config.yaml", "summary.json", "metrics.csv", "env.json", "report.html",
             "checkpoints/last.pt", "checkpoints/best.pt", "checkpoints/step-9.pt",
             "checkpoints/preds.csv", "tensorboard/preds.csv", ".lock"]  # fmt: skip


@pytest.mark.parametrize("name", RUN_FILES)
def test_predict_never_writes_into_a_runs_own_files(cli, run, x_npy, name):
    before = snapshot(run)
    refused(cli("predict", str(run), str(x_npy), "--out", str(run / name)), "--out")
    assert snapshot(run) == before


def test_predict_onto_the_checkpoint_it_reads(cli, run, x_npy):
    before = snapshot(run)
    ckpt = run / "checkpoints" / "last.pt"
    refused(cli("predict", str(ckpt), str(x_npy), "--out", str(ckpt)), "the model being read")
    assert snapshot(run) == before


@pytest.mark.parametrize("spelling", ["x.npy", "./sub/../x.npy", "link.npy", "hard.npy"])
def test_predict_onto_its_input_array_under_any_spelling(cli, run, tmp_path, x_npy, spelling):
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.npy").symlink_to(x_npy)
    os.link(x_npy, tmp_path / "hard.npy")
    before = x_npy.read_bytes()
    refused(cli("predict", str(run), "x.npy", "--out", spelling), "the input array")
    assert x_npy.read_bytes() == before


def test_predict_onto_the_artifact_it_reads(cli, run, tmp_path, x_npy):
    code, _, err = cli("export", str(run), "--format", "torchscript", "--out", "m.torchscript")
    assert code == 0, err
    before = (tmp_path / "m.torchscript").read_bytes()
    refused(cli("predict", "m.torchscript", "x.npy", "--out", "m.torchscript"),
            "the model being read")  # fmt: skip
    assert (tmp_path / "m.torchscript").read_bytes() == before


def test_predict_to_a_fresh_file_still_works(cli, run, tmp_path, x_npy):
    code, _, err = cli("predict", str(run), "x.npy", "--out", "preds.csv")
    assert code == 0, err
    assert (tmp_path / "preds.csv").read_text().startswith("index,prediction")
    code, _, err = cli("predict", str(run), "x.npy", "--out", "preds.csv")  # replaced: ok
    assert code == 0, err


@pytest.mark.parametrize("name", ["config.yaml", "summary.json", "metrics.csv",
                                  "checkpoints/last.pt", "checkpoints/report.html",
                                  "tensorboard/r.html"])  # fmt: skip
def test_report_never_writes_into_a_runs_own_files(cli, run, name):
    before = snapshot(run)
    refused(cli("report", str(run), "--out", str(run / name)), "report: --out")
    assert snapshot(run) == before


def test_report_of_two_runs_onto_the_second_runs_metrics(cli, run, tmp_path):
    other = tmp_path / "other"
    trainwell.fit(load_config(overrides=[*SMALL, f"run.dir={other}"]))
    before = snapshot(other)
    refused(cli("report", str(run), str(other), "--out", str(other / "metrics.csv")),
            "metrics.csv")  # fmt: skip
    assert snapshot(other) == before
    code, _, err = cli("report", str(run), str(other), "--out", "both.html")
    assert code == 0 and (tmp_path / "both.html").is_file(), err


def test_report_writes_its_own_report_html(cli, run):
    code, _, err = cli("report", str(run))
    assert code == 0, err
    code, _, err = cli("report", str(run), "--out", str(run / "report.html"))
    assert code == 0, err


@pytest.mark.parametrize("name", ["config.yaml", "summary.json", "metrics.csv",
                                  "checkpoints/step-9.pt", "checkpoints/last",
                                  "tensorboard/m.safetensors"])  # fmt: skip
def test_export_never_writes_into_a_runs_own_files(cli, run, name):
    before = snapshot(run)
    refused(cli("export", str(run), "--format", "safetensors", "--out", str(run / name)),
            "export: --out")  # fmt: skip
    assert snapshot(run) == before


def test_export_beside_the_checkpoint_by_default_still_works(cli, run, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    code, _, err = cli("export", str(copy), "--format", "safetensors")
    assert code == 0, err
    assert (copy / "checkpoints" / "best.safetensors").is_file()


@pytest.mark.parametrize("target", ["checkpoints", "tensorboard", "checkpoints/deeper"])
def test_profile_and_lr_find_folders_inside_a_runs_reserved_folders(cli, run, target):
    before = snapshot(run)
    refused(cli("profile", *SMALL, "--out", str(run / target)), "profile: --out", "checkpoints"
            if target.startswith("checkpoints") else "tensorboard")  # fmt: skip
    refused(cli("lr-find", *SMALL, "--output", str(run / target)), "lr-find: --output")
    assert snapshot(run) == before
    assert not (run / "checkpoints" / "deeper").exists()


def test_lr_find_output_that_would_overwrite_the_config(cli, tmp_path):
    (tmp_path / "lr_find.csv").write_text("data:\n  name: synthetic\n")
    refused(cli("lr-find", "--config", "lr_find.csv", "--output", "."), "the config being read")
    assert (tmp_path / "lr_find.csv").read_text() == "data:\n  name: synthetic\n"


@pytest.mark.parametrize("flag", ["--json", "--apply"])
@pytest.mark.parametrize("name", ["summary.json", "config.yaml", "checkpoints/b.json"])
def test_bench_data_never_writes_into_a_run(cli, run, flag, name):
    before = snapshot(run)
    refused(cli("bench-data", *SMALL, "--seconds", "1", flag, str(run / name)), flag)
    assert snapshot(run) == before


def test_bench_data_json_onto_its_own_config(cli, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("data:\n  name: synthetic\n")
    refused(cli("bench-data", "--config", "c.yaml", "--seconds", "1", "--json", "c.yaml"),
            "the config being read")  # fmt: skip
    assert config.read_text() == "data:\n  name: synthetic\n"


SCRIPT = "print('ran')\nopen('ran.txt', 'w').write('yes')\n"


def test_doctor_json_onto_the_script_it_runs(cli, tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "alias.py").symlink_to(tmp_path / "train.py")
    for spelling in ("train.py", "./train.py", "alias.py"):
        refused(cli("doctor", "--json", spelling, "train.py"), "the script being run")
    assert (tmp_path / "train.py").read_text() == SCRIPT
    assert not (tmp_path / "ran.txt").exists()


@pytest.mark.parametrize("name", ["summary.json", "doctor.json", "checkpoints/d.json"])
def test_doctor_json_into_a_run(cli, run, tmp_path, name):
    (tmp_path / "train.py").write_text(SCRIPT)
    before = snapshot(run)
    refused(cli("doctor", "--json", str(run / name), "train.py"), "doctor: --json")
    assert snapshot(run) == before and not (tmp_path / "ran.txt").exists()


def test_doctor_memory_out_in_a_runs_checkpoints(cli, run, tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    before = snapshot(run)
    refused(cli("doctor", "--memory", "--out", str(run / "checkpoints"), "train.py"),
            "doctor: --out")  # fmt: skip
    assert snapshot(run) == before and not (tmp_path / "ran.txt").exists()
