"""``trainwell bench-data`` without ``--model`` measures the loader and never builds a model.

The default model (simple_cnn) needs images; a tabular or text data set used to fail
with "simple_cnn needs images shaped (C, H, W)" unless a model was configured too.
"""

from __future__ import annotations

import io
import json

import pytest

import trainwell
from trainwell.benchdata.bench import bench_data
from trainwell.engine.loop.progress import make_console

CODE = "tests.samplers_code"
TABULAR = ["data.name=synthetic", "data.kwargs.num_samples=256", "data.kwargs.shape=[8]",
           "data.batch_size=32"]  # fmt: skip
TEXT = [f"data.name={CODE}:texts", "data.batch_size=8",
        f"data.collate={{name: '{CODE}:pad_collate', kwargs: {{pad_id: 0}}}}"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [
    TABULAR,
    [*TABULAR, "data.kwargs.num_classes=3", "train.grad_accum_steps=2"],
    TEXT,
    [*TEXT, f"data.batch_sampler={CODE}:buckets"],
    [f"data.name={CODE}:data", f"data.sampler={CODE}:balanced", "data.batch_size=16"],
])  # fmt: skip
def test_a_non_image_data_set_is_measured_without_a_model(cli, overrides):
    code, out, err = cli("bench-data", *overrides, "--seconds", "1", "--json", "b.json")
    assert code == 0, err
    with open("b.json") as f:
        table = json.load(f)
    assert table["table"] and table["recommended"]["batches_per_s"] > 0
    assert "model_batches_per_s" not in table and "simple_cnn" not in out + err


def test_no_model_is_built_without_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("bench-data built the model without --model")

    monkeypatch.setattr("trainwell.models.build_model", refuse)
    monkeypatch.setattr("trainwell.engine.build.parts.build_model", refuse)
    cfg = trainwell.load_config(overrides=TABULAR)
    result = bench_data(cfg, seconds=0.5, console=make_console(io.StringIO()), cores=1)
    assert result.model is None and result.sweep.recommended.batches_per_s > 0


@pytest.mark.slow
def test_the_header_names_a_batch_sampler(cli):
    code, out, err = cli("bench-data", *TEXT, f"data.batch_sampler={CODE}:buckets",
                         "--seconds", "0.5")  # fmt: skip
    assert code == 0, err
    assert "batches of data.batch_sampler" in out


@pytest.mark.slow
def test_with_model_the_model_is_still_built_and_checked(cli):
    # The default simple_cnn on 8 features: --model asks for it, so its refusal stands.
    code, out, err = cli("bench-data", *TABULAR, "--model", "--seconds", "1")
    assert code == 2 and "simple_cnn" in err
    code, out, err = cli("bench-data", *TABULAR, "model.name=mlp", "--model", "--seconds", "1")
    assert code == 0 and "model" in out, err
