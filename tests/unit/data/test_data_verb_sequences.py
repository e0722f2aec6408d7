"""``trainwell data`` on variable-length samples: lengths, the collate's first batch, a
batch that does not collate, language-model pairs."""

from __future__ import annotations

import json
import statistics

import pytest

from tests.unit.data.test_data_verb import user_module

TOKENS = """
    import torch
    from torch.utils.data import Dataset

    class Reviews(Dataset):
        def __init__(self, n=200, low=3, high=40):
            g = torch.Generator().manual_seed(0)
            self.lengths = torch.randint(low, high + 1, (n,), generator=g).tolist()
            self.labels = (torch.arange(n) % 2).tolist()
        def __len__(self):
            return len(self.lengths)
        def __getitem__(self, i):
            ids = torch.arange(1, self.lengths[i] + 1) % 97 + 1
            return {"input_ids": ids, "label": self.labels[i]}

    def pad(samples, value=0):
        ids = torch.nn.utils.rnn.pad_sequence([s["input_ids"] for s in samples],
                                              batch_first=True, padding_value=value)
        return {"input_ids": ids, "attention_mask": ids != value,
                "label": torch.tensor([s["label"] for s in samples])}

    class LM(Dataset):  # (input_ids, labels) of every length, shifted by one
        def __init__(self, n=100):
            self.n = n
        def __len__(self):
            return self.n
        def __getitem__(self, i):
            seq = torch.arange(i % 17 + 2)
            return seq[:-1], seq[1:]

    class Audio(Dataset):
        def __len__(self):
            return 60
        def __getitem__(self, i):
            return torch.linspace(-1, 1, 100 + 10 * i), i % 3
"""


def run(cli, tmp_path, *args):
    code, out, err = cli("data", *args, "--json", "d.json")
    assert code == 0, err
    return json.loads((tmp_path / "d.json").read_text()), out


@pytest.mark.slow
@pytest.mark.parametrize("low,high", [(3, 40), (1, 5), (50, 300)])
def test_token_lengths_and_the_padded_first_batch(cli, tmp_path, low, high):
    mod = user_module(tmp_path, TOKENS)
    report, out = run(cli, tmp_path, f"data.name={mod}:Reviews", f"data.kwargs.low={low}",
                      f"data.kwargs.high={high}", f"data.collate={mod}:pad",
                      "data.batch_size=8")  # fmt: skip
    from importlib import import_module

    from trainwell.data import split_off

    ds = import_module(mod).Reviews(low=low, high=high)
    train, _ = split_off(ds, 0.1)
    lengths = [ds.lengths[i] for i in train.indices]
    got = report["splits"]["train"]["inputs"]
    assert got["name"] == "input_ids" and got["shape"] is None
    assert got["lengths"] == {"min": min(lengths), "median": statistics.median(lengths),
                              "max": max(lengths)}  # fmt: skip
    assert got["dtype"] == "int64"
    batch = report["splits"]["train"]["first_batch"]["tensors"]
    first = [ds.lengths[i] for i in train.indices[:8]]
    assert batch["input_ids"] == {"shape": [8, max(first)], "dtype": "int64"}
    assert batch["attention_mask"]["dtype"] == "bool" and batch["label"]["shape"] == [8]
    assert report["splits"]["train"]["label_counts"] is not None
    assert "lengths" in out and "min/median/max" in out


@pytest.mark.slow
def test_samples_that_do_not_collate_are_a_warning(cli, tmp_path):
    mod = user_module(tmp_path, TOKENS)
    report, out = run(cli, tmp_path, f"data.name={mod}:Reviews")
    batch = report["splits"]["train"]["first_batch"]
    assert "error" in batch and "stack expects each tensor to be equal size" in batch["error"]
    assert any(w.startswith("train: the samples do not collate into a batch")
               and "data.collate" in w for w in report["warnings"])  # fmt: skip
    assert "does not collate" in out


@pytest.mark.slow
def test_language_model_pairs_have_target_lengths_not_classes(cli, tmp_path):
    mod = user_module(tmp_path, TOKENS)
    report, _ = run(cli, tmp_path, f"data.name={mod}:LM", "data.val_fraction=0.2",
                    "data.collate=torch.nn.utils.rnn:pad_sequence")  # fmt: skip
    train = report["splits"]["train"]
    assert train["label_counts"] is None and report["num_classes"] is None
    assert train["targets"]["lengths"]["min"] >= 1 and train["targets"]["lengths"]["max"] <= 17
    assert train["inputs"]["lengths"] == train["targets"]["lengths"]


@pytest.mark.slow
def test_variable_length_float_signals(cli, tmp_path):
    mod = user_module(tmp_path, TOKENS)
    report, _ = run(cli, tmp_path, f"data.name={mod}:Audio", "data.val_fraction=0.5")
    for name in ("train", "val"):
        got = report["splits"][name]["inputs"]
        assert got["min"] == pytest.approx(-1) and got["max"] == pytest.approx(1)
        assert got["mean"] == pytest.approx(0, abs=1e-6)
        assert 100 <= got["lengths"]["min"] < got["lengths"]["max"] <= 690
    lengths = sorted(100 + 10 * i for i in range(60))
    seen = [report["splits"][n]["inputs"]["lengths"] for n in ("train", "val")]
    assert min(s["min"] for s in seen) == lengths[0]
    assert max(s["max"] for s in seen) == lengths[-1]
