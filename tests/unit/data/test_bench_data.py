"""``trainwell bench-data``: the JSON contract, the recommendation rule, ``--apply``, bad
input, a ``--loader`` factory and the data-bound verdict, on real DataLoaders."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

import trainwell
from tests.conftest import SYNTHETIC
from trainwell.benchdata.settings import Row, Setting, extras_to_try, recommend, worker_counts
from trainwell.cli import main
from trainwell.engine.distributed.placement import Placement
from trainwell.engine.loading.loaders import LoaderSettings, TrainData
from trainwell.errors import UserError

ROW_KEYS = {"num_workers", "pin_memory", "persistent_workers", "prefetch_factor",
            "batches_per_s", "first_batch_s"}  # fmt: skip

# A data set that costs 4 ms a sample (an I/O-like wait: workers overlap it on any core
# count), and factories for --loader: a DataLoader, a plain list of batches, failures.
SLOWDATA = textwrap.dedent(
    """
    import time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __init__(self, num_samples=256, delay=0.004):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(num_samples, 8, generator=g)
            self.targets = torch.randint(0, 4, (num_samples,), generator=g)
            self.delay = delay

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            time.sleep(self.delay)
            return self.x[i], self.targets[i]

    def loader():
        return DataLoader(Slow(delay=0.0005), batch_size=8, shuffle=True)

    def batches():
        return [(torch.randn(8, 8), torch.randint(0, 4, (8,))) for _ in range(20)]

    def broken():
        raise OSError("the bucket is gone")

    def not_iterable():
        return 42

    NOT_A_FUNCTION = torch.zeros(2)
    """
)


@pytest.fixture
def slowdata(tmp_path):
    (tmp_path / "bench_slowdata.py").write_text(SLOWDATA)
    return tmp_path


def _json(tmp_path, name="bench.json"):
    return json.loads((tmp_path / name).read_text())


def _check_rule(doc):
    """The recommended row is in the table, within 5% of the fastest, and no row that is
    as fast is cheaper."""
    table, rec = doc["table"], doc["recommended"]
    assert rec in table
    best = max(r["batches_per_s"] for r in table)
    assert rec["batches_per_s"] >= 0.95 * best
    cost = lambda r: Setting(r["num_workers"], r["pin_memory"], r["persistent_workers"],  # noqa: E731
                             r["prefetch_factor"]).cost()  # fmt: skip
    for row in table:
        if row["batches_per_s"] >= 0.95 * best:
            assert cost(row) >= cost(rec), (row, rec)


# -- the rule, on fake tables ---------------------------------------------------------


def test_recommendation_takes_the_cheapest_within_five_percent_of_the_fastest():
    rows = [
        Row(Setting(0), 20.0, 0.0),
        Row(Setting(1), 60.0, 0.1),
        Row(Setting(2), 97.0, 0.2),
        Row(Setting(3), 100.0, 0.3),
        Row(Setting(2, persistent_workers=True), 99.0, 0.2),
        Row(Setting(2, prefetch_factor=4), 96.5, 0.2),
    ]
    assert recommend(rows).setting == Setting(2)  # 97 >= 95: the fewest workers, no extras
    rows[2].batches_per_s = 94.0  # now only the extras and 3 workers are near the top
    assert recommend(rows).setting == Setting(2, persistent_workers=True)
    assert recommend(rows, tolerance=0.0).setting == Setting(3)
    # Between equally cheap rows the faster wins; a row below 95% never does.
    tie = [Row(Setting(1, prefetch_factor=4), 99.0, 0.1), Row(Setting(1, True), 100.0, 0.1)]
    assert recommend(tie).setting == Setting(1, True)


def test_worker_counts_and_extras():
    assert worker_counts(1) == [0, 1]
    assert worker_counts(4) == [0, 1, 2, 3, 4]
    assert worker_counts(64)[-1] == 64 and len(worker_counts(64)) < 20
    described = [s.describe() for s in extras_to_try(Setting(2), cuda=True)]
    assert described == ["2 workers, pinned", "2 workers, persistent", "2 workers, prefetch 4"]
    assert extras_to_try(Setting(0), cuda=False) == []


def test_new_data_keys_reach_the_engines_loader():
    cfg = trainwell.load_config(overrides=["data.persistent_workers=false",
                                           "data.prefetch_factor=6"])  # fmt: skip
    assert (cfg.data.persistent_workers, cfg.data.prefetch_factor) == (False, 6)
    with pytest.raises(UserError, match="data.prefetch_factor"):
        trainwell.load_config(overrides=["data.prefetch_factor=0"])
    ds = torch.utils.data.TensorDataset(torch.zeros(8, 2), torch.zeros(8))
    cpu = Placement(torch.device("cpu"))
    default = TrainData.build(ds, LoaderSettings(batch_size=4, num_workers=1), cpu).loader
    assert default.persistent_workers and default.prefetch_factor == 2  # unchanged
    tuned = LoaderSettings(batch_size=4, num_workers=1, persistent_workers=False,
                           prefetch_factor=6)  # fmt: skip
    loader = TrainData.build(ds, tuned, cpu).loader
    assert not loader.persistent_workers and loader.prefetch_factor == 6


# -- the command -----------------------------------------------------------------------


@pytest.mark.slow
def test_json_shape_and_apply_writes_a_loadable_config(cli, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("optim:\n  lr: 0.02\ndata:\n  batch_size: 32\n")
    code, out, err = cli("bench-data", *SYNTHETIC, "--seconds", "2", "--json", "bench.json",
                         "--apply", str(config))  # fmt: skip
    assert code == 0, err
    doc = _json(tmp_path)
    assert set(doc) == {"table", "recommended"}
    assert len(doc["table"]) >= 2  # 0 workers and at least 1
    for row in [*doc["table"], doc["recommended"]]:
        assert set(row) >= ROW_KEYS and set(row) - ROW_KEYS <= {"peak_rss_mb"}
        assert isinstance(row["num_workers"], int) and row["batches_per_s"] > 0
        assert row["first_batch_s"] >= 0
        if row["num_workers"] == 0:
            assert row["prefetch_factor"] is None and not row["persistent_workers"]
    assert [r["num_workers"] for r in doc["table"]][:2] == [0, 1]
    _check_rule(doc)
    assert "recommended" in out and "override" in out

    cfg = trainwell.load_config(config)
    rec = doc["recommended"]
    assert cfg.data.num_workers == rec["num_workers"]
    assert cfg.data.persistent_workers == rec["persistent_workers"]
    assert cfg.data.prefetch_factor == rec["prefetch_factor"]
    assert cfg.optim.lr == 0.02 and cfg.data.batch_size == 32  # other keys kept


@pytest.mark.slow
def test_apply_creates_a_missing_config(cli, slowdata):
    code, _, err = cli("bench-data", "--loader", "bench_slowdata:loader", "--seconds", "1",
                       "--apply", "new.yaml")  # fmt: skip
    assert code == 0, err
    cfg = trainwell.load_config(slowdata / "new.yaml")
    assert cfg.data.num_workers in worker_counts(8)
    assert not list(slowdata.glob(".*.tmp"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--loader", "no_such_module_xyz:make"], "--loader: cannot import module"),
        (["--loader", "bench_slowdata:missing"], "has no attribute"),
        (["--loader", "bench_slowdata:broken"], "raised OSError: the bucket is gone"),
        (["--loader", "bench_slowdata:not_iterable"], "returned int, not a DataLoader"),
        (["--loader", "bench_slowdata:NOT_A_FUNCTION"], "is a Tensor, not a function"),
        (["--loader", "nocolon"], "not an import path"),
        (["--seconds", "0"], "--seconds must be a positive number"),
        (["--seconds", "-3"], "--seconds must be a positive number"),
        (["--seconds", "nan"], "--seconds must be a positive number"),
        (["--json", "no/such/folder/out.json"], "--json: the folder no/such/folder"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, slowdata, args, message):
    code, out, err = cli("bench-data", *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("trainwell: error: "), err
    assert message in err, err


@pytest.mark.slow
def test_apply_to_an_iterable_of_batches_is_refused(cli, slowdata):
    code, _, err = cli("bench-data", "--loader", "bench_slowdata:batches", "--seconds", "0.5",
                       "--apply", "x.yaml")  # fmt: skip
    assert code == 2 and "not a DataLoader" in err and err.count("\n") == 1
    assert not (slowdata / "x.yaml").exists()


@pytest.mark.slow
def test_a_loader_factory_is_swept(cli, slowdata):
    code, out, err = cli("bench-data", "--loader", "bench_slowdata:loader", "--seconds", "1.5",
                         "--json", "bench.json")  # fmt: skip
    assert code == 0, err
    doc = _json(slowdata)
    workers = [r["num_workers"] for r in doc["table"]]
    assert workers[:2] == [0, 1]
    _check_rule(doc)
    assert "--loader bench_slowdata:loader" in out


@pytest.mark.slow
def test_an_iterable_of_batches_is_timed_as_given(cli, slowdata):
    code, out, err = cli("bench-data", "--loader", "bench_slowdata:batches", "--seconds", "0.3",
                         "--json", "bench.json")  # fmt: skip
    assert code == 0, err
    doc = _json(slowdata)
    assert len(doc["table"]) == 1 and doc["table"][0]["num_workers"] is None
    assert doc["recommended"] == doc["table"][0] and doc["recommended"]["batches_per_s"] > 0
    assert "as given" in out


@pytest.mark.slow
def test_a_slow_data_set_is_data_bound_and_workers_help(cli, slowdata):
    code, out, err = cli(
        "bench-data", "data.name=bench_slowdata:Slow", "data.batch_size=16",
        "model.name=mlp", "model.kwargs.hidden=[16]", "train.precision=fp32",
        "--model", "--seconds", "4", "--json", "bench.json",
    )  # fmt: skip
    assert code == 0, err
    doc = _json(slowdata)
    assert doc["bottleneck"] == "data"
    assert doc["model_batches_per_s"] > 2 * doc["recommended"]["batches_per_s"]
    assert doc["bottleneck_factor"] > 2
    assert "data-bound" in out
    # 64 ms of waiting per batch: a second worker waits alongside the first.
    plain = next(r for r in doc["table"] if r["num_workers"] == 0)
    if max(r["num_workers"] for r in doc["table"]) >= 2:
        assert doc["recommended"]["num_workers"] >= 2, doc["table"]
        assert doc["recommended"]["batches_per_s"] > 1.4 * plain["batches_per_s"]
    _check_rule(doc)


@pytest.mark.slow
def test_help_names_every_option():
    with pytest.raises(SystemExit) as exc:
        main(["bench-data", "--help"])
    assert exc.value.code == 0


@pytest.mark.slow
def test_benchmark_quick(tmp_path):
    from tests.project.test_benchmarks import run_quick

    out = run_quick("data.py", tmp_path, "ratio (recommended / num_workers=0, samples/s)", 90)
    assert "ratio (recommended / best of a full sweep, batches/s)" in out
    assert "data wait" in out


def test_docstring_examples_of_the_package():
    import doctest
    import importlib
    import pkgutil

    import trainwell.benchdata

    for info in pkgutil.iter_modules(trainwell.benchdata.__path__):
        module = importlib.import_module(f"trainwell.benchdata.{info.name}")
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, f"{result.failed} docstring example(s) of {info.name} failed"
