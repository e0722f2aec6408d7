"""``trainwell data``: sizes, label counts and their warnings, input statistics, the first
batch, the JSON contract and bad input, on the built-in data and on user data sets."""

from __future__ import annotations

import json
import textwrap
import uuid

import pytest
import torch

from trainwell.data.digits import load_digits_splits


def user_module(tmp_path, code: str) -> str:
    """Write ``code`` as a fresh module beside the test (a new name each time: no import
    cache shared between tests); its name."""
    name = f"dv_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))
    return name


def report_of(cli, tmp_path, *args: str) -> tuple[dict, str]:
    path = tmp_path / "data.json"
    code, out, err = cli("data", *args, "--json", str(path))
    assert code == 0, err
    return json.loads(path.read_text()), out


# --- the default: scikit-learn's digits ------------------------------------------------------


@pytest.mark.slow
def test_default_digits_report_matches_the_data(cli, tmp_path):
    report, out = report_of(cli, tmp_path)
    splits = dict(zip(("train", "val", "test"), load_digits_splits()))
    assert set(report["splits"]) == set(splits)
    for name, ds in splits.items():
        got = report["splits"][name]
        x, y = ds.tensors
        assert got["size"] == len(ds)
        expected = {str(k): int((y == k).sum()) for k in y.unique().tolist()}
        assert got["label_counts"] == expected
        inputs = got["inputs"]
        assert inputs["shape"] == [1, 8, 8]
        assert inputs["mean"] == pytest.approx(float(x.double().mean()), abs=1e-6)
        assert inputs["std"] == pytest.approx(float(x.double().std(unbiased=False)), rel=1e-6)
        assert inputs["min"] == pytest.approx(float(x.min()))
        assert inputs["max"] == pytest.approx(float(x.max()))
        assert inputs["nan"] == inputs["inf"] == 0
        assert len(inputs["channels"]) == 1
        batch = got["first_batch"]["tensors"]
        rows = 64 if name == "train" else 256
        assert batch["0"] == {"shape": [rows, 1, 8, 8], "dtype": "float32"}
        assert batch["1"] == {"shape": [rows], "dtype": "int64"}
    assert report["num_classes"] == 10
    assert report["warnings"] == []
    assert "no warnings" in out and "train  1257 samples" in out


@pytest.mark.slow
def test_overrides_reach_the_data(cli, tmp_path):
    report, _ = report_of(cli, tmp_path, "data.name=synthetic", "data.kwargs.num_samples=300",
                          "data.kwargs.shape=[5]", "data.kwargs.num_classes=3",
                          "data.batch_size=16")  # fmt: skip
    train = report["splits"]["train"]
    assert train["size"] + report["splits"]["val"]["size"] == 300
    assert "test" not in report["splits"]
    assert train["first_batch"]["tensors"]["0"]["shape"] == [16, 5]
    assert report["num_classes"] == 3 and "channels" not in train["inputs"]


# --- labels ------------------------------------------------------------------------------

IMBALANCED = """
    import torch
    from torch.utils.data import Dataset, TensorDataset

    def labels(n, share, seed):
        g = torch.Generator().manual_seed(seed)
        y = torch.randint(1, 5, (n,), generator=g)
        y[torch.randperm(n, generator=g)[: int(n * share)]] = 0
        return y

    class Pairs(Dataset):  # read sample by sample
        def __init__(self, n=400, share=0.62):
            self.y = labels(n, share, 1)
            self.x = torch.randn(n, 6)
        def __len__(self):
            return len(self.y)
        def __getitem__(self, i):
            return self.x[i], int(self.y[i])

    def tensors(n=500, share=0.7):  # read a slice at a time
        return TensorDataset(torch.randn(n, 3), labels(n, share, 2))
"""


@pytest.mark.slow
@pytest.mark.parametrize("factory,kwargs", [("Pairs", {}), ("Pairs", {"share": 0.8}),
                                            ("tensors", {}), ("tensors", {"share": 0.9})])
def test_majority_class_is_named_with_its_share(cli, tmp_path, factory, kwargs):
    mod = user_module(tmp_path, IMBALANCED)
    extra = [f"data.kwargs.{k}={v}" for k, v in kwargs.items()]
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:{factory}", *extra)
    counts = report["splits"]["train"]["label_counts"]
    share = counts["0"] / sum(counts.values())
    assert share > 0.55
    assert f"train: {share:.0%} of samples are class 0" in report["warnings"]
    assert report["splits"]["train"]["labels"]["majority_class"] == 0
    assert report["splits"]["train"]["labels"]["majority_share"] == pytest.approx(share)
    assert report["splits"]["train"]["labels"]["missing"] == []


MISSING = """
    import torch
    from torch.utils.data import TensorDataset

    def make(missing=7, classes=10, n=600):
        y = torch.arange(n) % classes
        val_y = y[:200][y[:200] != missing]
        return {"train": TensorDataset(torch.randn(n, 4), y),
                "val": TensorDataset(torch.randn(len(val_y), 4), val_y)}

    def never(classes=10, n=500):
        # class 3 in no split at all; the model's 10 classes say it should exist
        y = torch.arange(n) % classes
        y[y == 3] = 4
        return TensorDataset(torch.randn(n, 4), y)
"""


@pytest.mark.slow
@pytest.mark.parametrize("missing", [7, 0, 9])
def test_class_missing_from_val(cli, tmp_path, missing):
    mod = user_module(tmp_path, MISSING)
    report, out = report_of(cli, tmp_path, f"data.name={mod}:make",
                            f"data.kwargs.missing={missing}")  # fmt: skip
    train_count = report["splits"]["train"]["label_counts"][str(missing)]
    assert f"val: class {missing} never appears (train has {train_count})" in report["warnings"]
    assert str(missing) not in report["splits"]["val"]["label_counts"]
    assert report["splits"]["val"]["labels"]["missing"] == [missing]
    assert f"val: class {missing} never appears" in out


def test_class_in_no_split_given_the_number_of_classes(cli, tmp_path):
    mod = user_module(tmp_path, MISSING)
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:never", "data.num_classes=10")
    assert "class 3 never appears in any split (10 classes, from data.num_classes)" in report[
        "warnings"]
    # The model decides too: mlp built for 10 classes, no data.num_classes given.
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:never", "model.name=mlp")
    assert report["num_classes"] == 10
    assert any("class 3 never appears" in w for w in report["warnings"])


GAPS = """
    import torch
    from torch.utils.data import TensorDataset

    def gaps(values="1,5,9", n=300):
        values = torch.tensor([int(v) for v in str(values).split(",")])
        y = values[torch.arange(n) % len(values)]
        return TensorDataset(torch.randn(n, 4), y)

    class Wide(torch.nn.Module):  # 12 outputs, whatever the data says
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 12)
        def forward(self, x):
            return self.fc(x)
"""


@pytest.mark.slow
@pytest.mark.parametrize("values", ["1,5,9", "2,3,4,5", "0,1,2,10"])
def test_labels_that_are_not_contiguous(cli, tmp_path, values):
    mod = user_module(tmp_path, GAPS)
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:gaps", f"data.kwargs.values={values}",
                          "model.name=mlp")  # fmt: skip
    distinct = sorted(int(v) for v in values.split(","))
    assert sorted(int(k) for k in report["splits"]["train"]["label_counts"]) == distinct
    lines = [w for w in report["warnings"] if "labels are not contiguous" in w]
    assert lines == [
        f"labels are not contiguous 0..C-1: {len(distinct)} distinct values "
        f"{', '.join(map(str, distinct))}; map them to 0..{len(distinct) - 1}"
    ]


@pytest.mark.slow
def test_labels_outside_the_classes_are_reported_not_refused(cli, tmp_path):
    mod = user_module(tmp_path, GAPS)
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:gaps", "data.kwargs.values=0,1,2,4",
                          "data.num_classes=3")  # fmt: skip
    n = report["splits"]["train"]["label_counts"]["4"]
    assert f"train: {n} labels outside [0, 3) (4: {n}); the loss needs 0..2" in report["warnings"]
    # `trainwell train` refuses the same data before training
    code, _, err = cli("train", f"data.name={mod}:gaps", "data.kwargs.values=0,1,2,4",
                       "data.num_classes=3", "--dry-run")  # fmt: skip
    assert code == 2 and "labels out of range" in err


def test_the_models_outputs_give_the_number_of_classes(cli, tmp_path):
    mod = user_module(tmp_path, GAPS)
    ten = ",".join(str(k) for k in range(10))
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:gaps", f"data.kwargs.values={ten}",
                          f"model.name={mod}:Wide")  # fmt: skip
    assert report["num_classes"] == 12 and report["classes_from"] == "the model's outputs"
    assert ("classes 10, 11 never appear in any split (12 classes, from the model's outputs)"
            in report["warnings"])


# --- inputs ------------------------------------------------------------------------------

NONFINITE = """
    import torch
    from torch.utils.data import Dataset

    class Holes(Dataset):
        def __init__(self, n=200, nan_at="3,50,101", inf_at=""):
            self.x = torch.randn(n, 2, 10, 10, generator=torch.Generator().manual_seed(5))
            self.y = torch.arange(n) % 4
            for i in [int(v) for v in str(nan_at).split(",") if v != ""]:
                self.x[i, 1, 2, 3] = float("nan")
                self.x[i, 0, 0, 0] = float("nan")
            for i in [int(v) for v in str(inf_at).split(",") if v != ""]:
                self.x[i, 0, 5, 5] = float("inf")
        def __len__(self):
            return len(self.y)
        def __getitem__(self, i):
            return self.x[i], self.y[i]
"""


@pytest.mark.slow
@pytest.mark.parametrize("nan_at,inf_at", [("3,50,101", ""), ("7", "8,9"), ("", "0")])
def test_nan_and_inf_inputs_are_counted(cli, tmp_path, nan_at, inf_at):
    mod = user_module(tmp_path, NONFINITE)
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:Holes", f"data.kwargs.nan_at='{nan_at}'",
                          f"data.kwargs.inf_at='{inf_at}'", "data.val_fraction=0.5")  # fmt: skip
    from importlib import import_module

    from trainwell.data import split_off

    train, val = split_off(import_module(mod).Holes(200, nan_at, inf_at), 0.5)
    for name, ds in (("train", train), ("val", val)):
        x = torch.stack([ds[i][0] for i in range(len(ds))])
        nan_samples = int(x.isnan().flatten(1).any(1).sum())
        inf_samples = int(x.isinf().flatten(1).any(1).sum())
        got = report["splits"][name]["inputs"]
        assert got["nan"] == int(x.isnan().sum()) and got["inf"] == int(x.isinf().sum())
        finite = x[x.isfinite()].double()
        assert got["mean"] == pytest.approx(float(finite.mean()), abs=1e-9)
        channel1 = x[:, 1][x[:, 1].isfinite()].double()
        assert got["channels"][1]["mean"] == pytest.approx(float(channel1.mean()), abs=1e-9)
        for kind, count in (("NaN", nan_samples), ("Inf", inf_samples)):
            words = "input contains" if count == 1 else "inputs contain"
            line = f"{name}: {count} {words} {kind}"
            assert (line in report["warnings"]) == (count > 0), (line, report["warnings"])


SCALES = """
    import torch
    from torch.utils.data import TensorDataset

    def raw(n=300):  # pixels 0..255, never scaled
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, 256, (n, 16), generator=g).float()
        return TensorDataset(x, torch.arange(n) % 2)

    def mismatch(n=300, factor=255.0):  # train standardized, val not
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, 16, generator=g)
        return (TensorDataset(x, torch.arange(n) % 2),
                TensorDataset(x[:100] * factor + 3, torch.arange(100) % 2))

    def constant(n=100):
        return TensorDataset(torch.full((n, 4), 0.5), torch.arange(n) % 2)
"""


def test_unscaled_shifted_and_constant_inputs(cli, tmp_path):
    mod = user_module(tmp_path, SCALES)
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:raw")
    assert any(w.startswith("train: input is not scaled") for w in report["warnings"])
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:mismatch")
    assert any(w.startswith("val: inputs have mean") and "normalized the same way" in w
               for w in report["warnings"]), report["warnings"]  # fmt: skip
    assert not any(w.startswith("train:") for w in report["warnings"])
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:constant")
    assert "train: input is constant (every value 0.5): nothing to learn from" in report["warnings"]


REGRESSION = """
    import torch
    from torch.utils.data import Dataset

    class Houses(Dataset):
        def __init__(self, n=150):
            g = torch.Generator().manual_seed(3)
            self.x = torch.randn(n, 5, generator=g)
            self.y = self.x.sum(1) * 10 + 100
        def __len__(self):
            return len(self.x)
        def __getitem__(self, i):
            return {"features": self.x[i], "y": float(self.y[i]), "id": f"house-{i}"}
"""


@pytest.mark.slow
def test_dict_samples_with_regression_targets(cli, tmp_path):
    mod = user_module(tmp_path, REGRESSION)
    report, out = report_of(cli, tmp_path, f"data.name={mod}:Houses",
                            "train.loss=mse")  # fmt: skip
    from importlib import import_module

    ds = import_module(mod).Houses()
    train = report["splits"]["train"]
    assert train["label_counts"] is None and report["num_classes"] is None
    assert train["inputs"]["name"] == "features" and set(train["inputs"]["fields"]) == {"features"}
    # the val split is carved out with the engine's fixed seed: the whole set's range bounds it
    assert ds.y.min() <= train["targets"]["min"] < train["targets"]["max"] <= ds.y.max()
    assert train["targets"]["dtype"] == "float64" or train["targets"]["dtype"] == "float32"
    assert train["first_batch"]["tensors"]["features"]["shape"] == [64, 5]
    assert not any("class" in w for w in report["warnings"])
    assert "y " in out  # the target's statistics line


@pytest.mark.slow
def test_iterable_data_set_has_no_size(cli, tmp_path):
    mod = user_module(tmp_path, """
        import torch
        from torch.utils.data import IterableDataset

        class Stream(IterableDataset):
            def __iter__(self):
                for i in range(300):
                    yield torch.full((3,), float(i)), i % 3
    """)  # fmt: skip
    report, out = report_of(cli, tmp_path, f"data.name={mod}:Stream", "train.max_steps=2")
    train = report["splits"]["train"]
    assert train["size"] is None and train["read"] == 300
    assert train["label_counts"] == {"0": 100, "1": 100, "2": 100}
    assert train["inputs"]["mean"] == pytest.approx(149.5)
    assert "unknown size" in out


@pytest.mark.slow
@pytest.mark.parametrize("limit", [50, 123])
def test_statistics_over_at_most_n_samples_say_so(cli, tmp_path, limit):
    mod = user_module(tmp_path, IMBALANCED)
    report, out = report_of(cli, tmp_path, f"data.name={mod}:Pairs", "data.kwargs.n=1000",
                            "--max-samples", str(limit))  # fmt: skip
    train = report["splits"]["train"]
    assert train["read"] == limit and train["stopped"] == "limit" and train["size"] == 900
    assert sum(train["label_counts"].values()) == limit  # counted over what was read
    assert f"statistics over {limit} drawn evenly" in out
    val = report["splits"]["val"]
    assert val["read"] == min(100, limit)
    assert val["stopped"] == ("limit" if limit < 100 else None)


@pytest.mark.slow
def test_a_slow_data_set_stops_at_the_time_budget(cli, tmp_path):
    mod = user_module(tmp_path, """
        import time
        import torch
        from torch.utils.data import Dataset

        class Slow(Dataset):
            def __len__(self):
                return 100000
            def __getitem__(self, i):
                time.sleep(0.002)
                return torch.zeros(2) + i, i % 2
    """)  # fmt: skip
    report, out = report_of(cli, tmp_path, f"data.name={mod}:Slow", "--seconds", "1")
    train = report["splits"]["train"]
    assert train["stopped"] == "time" and 0 < train["read"] < 2000
    assert "time limit reached" in out


# --- bad input: one line, exit 2 -----------------------------------------------------------

BROKEN = """
    import torch
    from torch.utils.data import Dataset

    def gone():
        raise FileNotFoundError("/data/train.csv")

    class BadRow(Dataset):
        def __len__(self):
            return 20
        def __getitem__(self, i):
            if i == 13:
                raise ValueError("row 13: could not convert 'abc' to float")
            return torch.zeros(2), 0

    def number():
        return 42
"""


@pytest.mark.parametrize("name,expected", [
    ("{mod}:gone", "cannot build"),
    ("{mod}:BadRow", "(index 13 of BadRow): ValueError: row 13: could not convert"),
    ("{mod}:number", "not a Dataset"),
    ("{mod}:nothing", "has no attribute"),
    ("no_such_module_here:fn", "cannot import module"),
])  # fmt: skip
def test_a_data_set_it_cannot_read_is_one_line_and_exit_2(cli, tmp_path, name, expected):
    mod = user_module(tmp_path, BROKEN)
    code, out, err = cli("data", f"data.name={name.format(mod=mod)}", "data.val_fraction=0.5")
    assert code == 2, err
    assert expected in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


@pytest.mark.parametrize("args,expected", [
    (["--max-samples", "0"], "--max-samples"),
    (["--seconds", "-1"], "--seconds"),
    (["--json", "no/such/folder/r.json"], "does not exist"),
    (["data.nope=1"], "data.nope"),
    (["data.batch_size=abc"], "data.batch_size"),
])  # fmt: skip
def test_bad_flags_and_keys(cli, args, expected):
    code, _, err = cli("data", *args)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


def test_out_that_is_a_file(cli, tmp_path):
    (tmp_path / "f").write_text("x")
    code, _, err = cli("data", "--out", "f")
    assert code == 2 and "is a file" in err


# --- the package's own examples ----------------------------------------------------------


@pytest.mark.parametrize("name", ["fields", "stats", "labels", "checks", "report", "render",
                                  "split", "grid", "dry_run", "__init__"])  # fmt: skip
def test_docstring_examples(name):
    import doctest
    import importlib

    module = importlib.import_module(
        "trainwell.datacheck" if name == "__init__" else f"trainwell.datacheck.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


LEAKS = """
    import torch
    from torch.utils.data import DataLoader, Dataset, TensorDataset

    def copied(copies=7, n=200):
        g = torch.Generator().manual_seed(4)
        x, y = torch.randn(n, 6, generator=g), torch.arange(n) % 3
        vx, vy = torch.randn(50, 6, generator=g), torch.arange(50) % 3
        vx[:copies] = x[10 : 10 + copies]
        x[100:103] = x[0]  # three repeats of the first sample inside train
        return TensorDataset(x, y), TensorDataset(vx, vy)

    class Rows(Dataset):
        def __init__(self, x):
            self.x = x
        def __len__(self):
            return len(self.x)
        def __getitem__(self, i):
            return {"x": self.x[i], "label": i % 2, "id": f"row-{i}"}

    def same_loader():
        ds = Rows(torch.randn(80, 3, generator=torch.Generator().manual_seed(0)))
        return DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=8)
"""


@pytest.mark.slow
@pytest.mark.parametrize("copies", [1, 7, 50])
def test_val_samples_that_are_also_in_train(cli, tmp_path, copies):
    mod = user_module(tmp_path, LEAKS)
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:copied", f"data.kwargs.copies={copies}")
    assert (f"val: {copies} of 50 samples also appear in train (identical inputs): its scores "
            "would flatter the model") in report["warnings"]  # fmt: skip
    assert report["splits"]["train"]["duplicates"] == 3
    assert report["splits"]["val"]["duplicates"] == 0


@pytest.mark.slow
def test_the_same_data_in_both_loaders(cli, tmp_path):
    mod = user_module(tmp_path, LEAKS)
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:same_loader", "train.max_steps=1")
    assert any(w.startswith("val: 80 of 80 samples also appear in train") for w in
               report["warnings"]), report["warnings"]  # fmt: skip
    assert report["splits"]["train"]["first_batch"]["tensors"]["x"]["shape"] == [8, 3]


def test_no_overlap_no_warning(cli, tmp_path):
    mod = user_module(tmp_path, LEAKS)
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:copied", "data.kwargs.copies=0")
    assert not any("also appear" in w for w in report["warnings"])


@pytest.mark.slow
def test_nan_in_named_fields_and_in_targets(cli, tmp_path):
    mod = user_module(tmp_path, """
        import torch
        from torch.utils.data import Dataset

        class Named(Dataset):
            def __len__(self):
                return 100
            def __getitem__(self, i):
                pixels = torch.full((4,), float("nan") if i in (1, 2) else 0.5 + i)
                y = float("inf") if i == 3 else float(i)
                return {"pixels": pixels, "y": y}

        def pairs():
            x = torch.randn(60, 3)
            y = torch.randn(60)
            y[[4, 9, 30, 31]] = float("nan")
            return torch.utils.data.TensorDataset(x, y), None
    """)  # fmt: skip
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:Named", "data.val_fraction=0.01")
    from trainwell.data import split_off

    train_idx = set(split_off(list(range(100)), 0.01)[0].indices)
    nan_rows, inf_rows = len({1, 2} & train_idx), len({3} & train_idx)
    assert report["splits"]["train"]["inputs"]["nan_samples"] == nan_rows
    assert report["splits"]["train"]["targets"]["inf_samples"] == inf_rows
    line = f"train: {nan_rows} sample{'s have' if nan_rows > 1 else ' has'} NaN in pixels"
    assert (line in report["warnings"]) == (nan_rows > 0)
    assert ("train: 1 sample has Inf in y" in report["warnings"]) == (inf_rows > 0)
    report, _ = report_of(cli, tmp_path, f"data.name={mod}:pairs")
    assert "train: 4 targets contain NaN" in report["warnings"]
    assert report["splits"]["train"]["targets"]["nan"] == 4
