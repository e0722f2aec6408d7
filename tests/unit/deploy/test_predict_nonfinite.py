"""predict on NaN/Inf input: some such samples are one warning line (how many samples and
values), and the predictions are still written; every sample NaN/Inf is refused in one
line, exit code 2, and nothing is written."""

from __future__ import annotations

import numpy as np
import pytest

import trainwell
from trainwell.config import load_config

SMALL = ["data.name=synthetic", "data.kwargs.num_samples=96", "data.kwargs.shape=[8]",
         "model.name=mlp", "model.kwargs.hidden=[8]", "train.max_steps=2"]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("nonfinite")
    trainwell.fit(load_config(overrides=[*SMALL, f"run.dir={root / 'run'}"]))
    return root / "run"


def _warning(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("trainwell: warning")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize(("bad", "samples", "values"), [
    ({(0, 0)}, 1, 1),
    ({(1, 2), (1, 3), (4, 0)}, 2, 3),
    ({(i, 5) for i in range(9)}, 9, 9),  # all but one sample
])  # fmt: skip
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_some_nonfinite_samples_warn_and_still_predict(cli, run, tmp_path, bad, samples,
                                                       values, value):  # fmt: skip
    x = np.ones((10, 8), dtype=np.float32)
    for i, j in bad:
        x[i, j] = value
    np.save(tmp_path / "x.npy", x)
    code, out, err = cli("predict", str(run), "x.npy", "--out", "p.csv")
    assert code == 0, err
    line = _warning(err)
    assert f"{samples} of 10 samples hold NaN/Inf ({values} of 80 values)" in line, line
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 11


@pytest.mark.slow
@pytest.mark.parametrize("fill", ["nan", "inf", "mixed", "one_per_sample"])
def test_every_sample_nonfinite_is_refused(cli, run, tmp_path, fill):
    x = np.ones((6, 8), dtype=np.float32)
    if fill == "nan":
        x[:] = np.nan
    elif fill == "inf":
        x[:] = np.inf
    elif fill == "mixed":
        x[::2] = np.nan
        x[1::2] = -np.inf
    else:
        x[np.arange(6), np.arange(6)] = np.nan
    np.save(tmp_path / "x.npy", x)
    code, out, err = cli("predict", str(run), "x.npy", "--out", "p.csv")
    assert code == 2 and out == "", err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainwell: error: "), err
    assert "every sample holds NaN/Inf" in lines[0] and "INPUT x.npy" in lines[0]
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.slow
def test_one_sample_without_batch_axis(cli, run, tmp_path):
    x = np.full((8,), np.nan, dtype=np.float32)  # one sample: its every value NaN
    np.save(tmp_path / "x.npy", x)
    code, _, err = cli("predict", str(run), "x.npy")
    assert code == 2 and "every sample holds NaN/Inf (8 of 8 values" in err, err


@pytest.mark.slow
def test_finite_input_gives_no_warning(cli, run, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((5, 8), dtype=np.float32))
    code, _, err = cli("predict", str(run), "x.npy")
    assert code == 0 and "warning" not in err, err


@pytest.mark.slow
def test_the_python_api_refuses_an_all_nan_array(run):
    from trainwell.errors import UserError
    from trainwell.predict import predict

    with pytest.raises(UserError, match="every sample holds NaN/Inf"):
        predict(run, np.full((3, 8), np.nan, dtype=np.float32))
