"""``trainwell batch-size`` (issue 26 §6): the fastest batch on the CPU, the largest that fits
on CUDA (the search checked on a fake device's memory limit), and ``--apply``'s edit of the
config file, which changes that one value and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import SYNTHETIC
from trainwell.commands.batch_size import apply_batch_size
from trainwell.config import load_config
from trainwell.engine.tools import batch_search
from trainwell.engine.tools.batch_search import Trial, find_batch_size


@pytest.mark.slow
def test_on_the_cpu_the_choice_follows_the_measured_trials():
    cfg = load_config(overrides=[*SYNTHETIC, "train.precision=fp32"])
    seen: list[str] = []
    result = find_batch_size(cfg, max_batch=64, steps=1, say=seen.append)
    sizes = [t.batch_size for t in result.trials]
    assert sizes[:2] == [8, 16] and sizes == sorted(sizes) and max(sizes) <= 64
    assert all(t.fits and t.samples_per_s > 0 for t in result.trials)
    top = max(t.samples_per_s for t in result.trials)
    within = [t.batch_size for t in result.trials if t.samples_per_s >= 0.97 * top]
    assert result.best == min(within)  # the smallest as fast as the fastest
    assert len(seen) == len(sizes) and seen[0].startswith("batch      8: ")
    assert result.configured == 32 and result.device == "cpu"


@pytest.mark.slow
def test_the_sizes_split_into_the_accumulation_steps():
    cfg = load_config(overrides=[*SYNTHETIC, "train.grad_accum_steps=4", "train.precision=fp32"])
    result = find_batch_size(cfg, max_batch=32, steps=1, say=lambda _: None)
    assert [t.batch_size for t in result.trials] == [8, 16, 32][: len(result.trials)]
    assert all(t.batch_size % 4 == 0 for t in result.trials)


@pytest.mark.slow
def test_a_size_is_never_larger_than_the_training_split():
    cfg = load_config(overrides=[*SYNTHETIC, "data.kwargs.num_samples=100", "train.precision=fp32"])
    result = find_batch_size(cfg, max_batch=4096, steps=1, say=lambda _: None)
    assert max(t.batch_size for t in result.trials) <= 90  # 100 samples, val carved out


class FakeTrier:
    """A device on which a batch fits when it is at most ``limit``: the CUDA search's logic."""

    def __init__(self, limit: int, configured: int = 32, accum: int = 1) -> None:
        self.limit, self.accum, self.trials = limit, accum, []
        self.cfg = load_config(overrides=[f"data.batch_size={configured}"])
        self.place = type("P", (), {"device": "cuda:0"})()

    def __call__(self, b: int) -> Trial:
        trial = Trial(b, b <= self.limit, 1.0 if b <= self.limit else None)
        self.trials.append(trial)
        return trial


@pytest.mark.parametrize(("limit", "configured"), [(300, 32), (1000, 32), (40, 64), (33, 32),
                                                   (3000, 256), (17, 128)])  # fmt: skip
def test_on_cuda_the_largest_size_that_fits_is_found_by_doubling_then_bisecting(limit, configured):
    trier = FakeTrier(limit, configured)
    result = batch_search.largest_that_fits(trier, 4096)
    assert result.best <= limit  # it fits
    assert limit - result.best <= max(1, result.best // 16)  # and little more would
    assert all(t.fits == (t.batch_size <= limit) for t in trier.trials)
    assert len(trier.trials) <= 16  # a search, not a scan


def test_on_cuda_a_size_capped_by_max_says_so():
    result = batch_search.largest_that_fits(FakeTrier(10_000), 512)
    assert result.best == 512 and "capped at 512" in result.reason


def test_nothing_fits_is_one_line():
    with pytest.raises(batch_search.UserError, match="not even a batch of 1 fits"):
        batch_search.largest_that_fits(FakeTrier(0, configured=8), 4096)


# -- --apply -------------------------------------------------------------------------------

CASES = {
    "block": ("# my run\ndata:\n  name: digits   # the default\n  batch_size: 32\n"
              "train:\n  epochs: 3\n",
              "# my run\ndata:\n  name: digits   # the default\n  batch_size: 256\n"
              "train:\n  epochs: 3\n"),
    "block without the key": ("data:\n    name: digits\nmodel: {name: mlp}\n",
                              "data:\n    batch_size: 256\n    name: digits\nmodel: {name: mlp}\n"),
    "nested key left alone": ("data:\n  kwargs:\n    batch_size: 3\n  batch_size: 16\n",
                              "data:\n  kwargs:\n    batch_size: 3\n  batch_size: 256\n"),
    "flow": ("data: {name: digits, batch_size: 32}  # flow\n",
             "data: {name: digits, batch_size: 256}  # flow\n"),
    "flow without the key": ("data: {name: digits}\n", "data: {name: digits, batch_size: 256}\n"),
    "no data section": ("train:\n  epochs: 2", "train:\n  epochs: 2\ndata:\n  batch_size: 256\n"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_apply_changes_that_one_value_and_keeps_the_rest(tmp_path, case):
    before, after = CASES[case]
    path = tmp_path / "c.yaml"
    path.write_text(before)
    apply_batch_size(path, 256)
    assert path.read_text() == after
    assert yaml.safe_load(path.read_text())["data"]["batch_size"] == 256
    assert [p.name for p in tmp_path.iterdir()] == ["c.yaml"]  # no temporary file left


def test_apply_refuses_a_file_it_cannot_edit_safely_and_leaves_it_untouched(tmp_path):
    path = tmp_path / "c.yaml"
    text = "base: &b {batch_size: 32}\ndata: *b\n"
    path.write_text(text)
    with pytest.raises(batch_search.UserError, match="cannot edit .* safely"):
        apply_batch_size(path, 256)
    assert path.read_text() == text


def test_the_verb_finds_and_applies(cli, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("data:\n  name: synthetic\n  batch_size: 32  # to tune\n"
                      "model: {name: mlp}\ntrain: {precision: fp32}\n")  # fmt: skip
    code, out, err = cli("batch-size", "--config", str(config), "--max", "32", "--steps", "1",
                         "--apply", "data.kwargs.num_samples=256")  # fmt: skip
    assert code == 0, err
    (chosen,) = [ln for ln in out.splitlines() if ln.startswith("batch size: ")]
    best = int(chosen.split()[2])
    assert best in (8, 16, 32) and f"wrote data.batch_size: {best} into" in out
    assert f"  batch_size: {best}  # to tune\n" in config.read_text()
    assert load_config(str(config)).data.batch_size == best


@pytest.mark.parametrize(
    ("args", "match"),
    [(["--apply"], "--apply writes into the config file; give --config FILE"),
     (["--apply", "--config", "missing.yaml"], "missing.yaml is not a file"),
     (["--steps", "0"], "--steps and --max must be at least 1"),
     (["data.nope=1"], "data.nope")],
)  # fmt: skip
def test_bad_input_is_one_line(cli, args, match):
    code, _, err = cli("batch-size", *SYNTHETIC, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and match in err, err


def test_results_are_plain_data():
    assert Path(batch_search.__file__).name == "batch_search.py"
    r = batch_search.BatchSizeResult(best=8, reason="r", device="cpu", configured=8,
                                     trials=[Trial(8, True, 1.0)])  # fmt: skip
    assert r.trial(8).fits and r.trial(16) is None
