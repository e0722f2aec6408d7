"""Tests for the built-in models, data sets, user import paths, early stopping and seeding."""

from __future__ import annotations

import random
import sys
import textwrap
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import Subset, TensorDataset

from trainwell.data import DataConfig, build_data, check_labels, split_off, targets_of
from trainwell.data.digits import load_digits_splits
from trainwell.data.synthetic import make_synthetic
from trainwell.engine.loading.seeding import seed_everything
from trainwell.engine.state.early_stopping import EarlyStopping
from trainwell.errors import UserError
from trainwell.models import ModelConfig, build_model, mlp, simple_cnn

SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32)]


# --- built-in models -------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factory", [simple_cnn, mlp])
def test_builtin_model_output_shape(factory, shape) -> None:
    net = factory(num_classes=7, input_shape=shape)
    assert net(torch.randn(3, *shape)).shape == (3, 7)
    net.eval()
    assert net(torch.randn(1, *shape)).shape == (1, 7)


def test_simple_cnn_sizes_its_first_linear_layer() -> None:
    net = simple_cnn(10, (3, 32, 32), channels=(8, 16), hidden=20)
    linears = [m for m in net if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(16 * 8 * 8, 20), (20, 10)]
    assert net[0].in_channels == 3


def test_mlp_flattens_input() -> None:
    net = mlp(4, (3, 5, 2), hidden=(6,))
    linears = [m for m in net if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(30, 6), (6, 4)]


@pytest.mark.parametrize(
    "shape, match", [((64,), "shaped"), ((8, 8), "shaped"), ((1, 2, 2), "at least 4x4")]
)
def test_simple_cnn_rejects_bad_shapes(shape, match) -> None:
    with pytest.raises(UserError, match=match) as info:
        simple_cnn(10, shape)
    assert str(tuple(shape)) in str(info.value) or "2x2" in str(info.value)


# --- build_model -----------------------------------------------------------------------


def _linears(net: nn.Module) -> list[tuple[int, int]]:
    return [(m.in_features, m.out_features) for m in net.modules() if isinstance(m, nn.Linear)]


def test_build_model_injects_num_classes_and_input_shape() -> None:
    net = build_model(ModelConfig(name="mlp", kwargs={"hidden": [5]}), 7, (1, 8, 8))
    assert _linears(net) == [(64, 5), (5, 7)]
    cnn = build_model(ModelConfig(name="simple_cnn"), 3, [3, 32, 32])
    assert cnn(torch.randn(2, 3, 32, 32)).shape == (2, 3)


def test_build_model_kwargs_override_injected_values() -> None:
    cfg = ModelConfig(name="mlp", kwargs={"num_classes": 2, "input_shape": [2, 4, 4], "hidden": []})
    net = build_model(cfg, 10, (1, 8, 8))
    assert _linears(net) == [(32, 2)]


def test_build_model_without_num_classes_uses_factory_default() -> None:
    net = build_model(ModelConfig(name="mlp", kwargs={"hidden": []}), None, (1, 8, 8))
    assert _linears(net) == [(64, 10)]


def test_model_config_rejects_unknown_builtin() -> None:
    with pytest.raises(UserError) as info:
        ModelConfig(name="resnet9000")
    assert str(info.value).startswith("model.name:")


USER_MODELS = """
from torch import nn

CALLS = []

def tiny(num_classes, input_shape, hidden=4):
    CALLS.append(("tiny", num_classes, tuple(input_shape), hidden))
    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0] * input_shape[1] * input_shape[2],
                         hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

def takes_any(**kwargs):
    CALLS.append(("takes_any", dict(kwargs)))
    return nn.Linear(1, 1)

def takes_nothing():
    CALLS.append(("takes_nothing",))
    return nn.Identity()

class Net(nn.Module):
    def __init__(self, num_classes=10, width=3):
        super().__init__()
        self.fc = nn.Linear(width, num_classes)

class Factories:
    @staticmethod
    def nested(num_classes):
        return nn.Linear(2, num_classes)

def not_a_module(num_classes):
    return {"num_classes": num_classes}
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a module into tmp_path, importable by a unique name; return (name, writer)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(source: str) -> str:
        name = f"tw_user_{uuid.uuid4().hex[:12]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def test_build_model_from_import_path(user_module) -> None:
    mod = user_module(USER_MODELS)
    net = build_model(ModelConfig(name=f"{mod}:tiny", kwargs={"hidden": 6}), 5, (1, 8, 8))
    assert net(torch.randn(2, 1, 8, 8)).shape == (2, 5)
    calls = sys.modules[mod].CALLS
    assert calls == [("tiny", 5, (1, 8, 8), 6)]

    build_model(ModelConfig(name=f"{mod}:takes_any"), 4, (2, 3))
    build_model(ModelConfig(name=f"{mod}:takes_nothing"), 4, (2, 3))
    assert calls[1:] == [
        ("takes_any", {"num_classes": 4, "input_shape": (2, 3)}),
        ("takes_nothing",),
    ]

    cls_net = build_model(ModelConfig(name=f"{mod}:Net", kwargs={"width": 9}), 3, (9,))
    assert (cls_net.fc.in_features, cls_net.fc.out_features) == (9, 3)
    nested = build_model(ModelConfig(name=f"{mod}:Factories.nested"), 8, (2,))
    assert nested.out_features == 8


@pytest.mark.parametrize(
    "name, kwargs, key, match",
    [
        ("tw_no_such_module_xyz:net", {}, "model.name", "cannot import module"),
        ("{mod}:missing", {}, "model.name", "no attribute 'missing'"),
        ("{mod}:not_a_module", {}, "model.name", "returned dict, not an nn.Module"),
        ("{mod}:tiny", {"bogus": 1}, "model.kwargs", "bogus"),
        ("{mod}:takes_nothing", {"width": 1}, "model.kwargs", "width"),
    ],
)
def test_build_model_import_errors(user_module, name, kwargs, key, match) -> None:
    mod = user_module(USER_MODELS)
    cfg = ModelConfig(name=name.format(mod=mod), kwargs=kwargs)
    with pytest.raises(UserError, match=match) as info:
        build_model(cfg, 3, (1, 8, 8))
    assert str(info.value).startswith(f"{key}:")


# --- digits ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    return load_digits_splits()


def _rows(ds: TensorDataset) -> set[bytes]:
    x = ds.tensors[0].flatten(1).numpy()
    return {row.tobytes() for row in x}


def test_digits_split_sizes_and_types(digits) -> None:
    train, val, test = digits
    assert (len(train), len(val), len(test)) == (1257, 270, 270)
    for ds in digits:
        x, y = ds.tensors
        assert x.dtype == torch.float32 and x.shape[1:] == (1, 8, 8)
        assert y.dtype == torch.int64


def test_digits_stratified(digits) -> None:
    overall = Counter()
    for ds in digits:
        overall.update(ds.tensors[1].tolist())
    total = sum(overall.values())
    for ds in digits:
        counts = Counter(ds.tensors[1].tolist())
        assert sorted(counts) == list(range(10))
        for c in range(10):
            share = counts[c] / len(ds)
            assert abs(share - overall[c] / total) < 0.01, (c, share)


def test_digits_splits_disjoint_and_cover_all(digits) -> None:
    train, val, test = (_rows(ds) for ds in digits)
    assert (len(train), len(val), len(test)) == (1257, 270, 270)  # no duplicate images
    assert not train & test
    assert not train & val
    assert not val & test
    assert len(train | val | test) == 1797


def test_digits_identical_across_calls(digits) -> None:
    again = load_digits_splits()
    for a, b in zip(digits, again):
        assert torch.equal(a.tensors[0], b.tensors[0])
        assert torch.equal(a.tensors[1], b.tensors[1])


def test_digits_train_standardized(digits) -> None:
    x = digits[0].tensors[0]
    assert abs(float(x.mean())) < 1e-5
    assert float(x.std()) == pytest.approx(1.0, abs=1e-3)
    # Val/test use the train statistics: close to, but not exactly, standardized.
    assert abs(float(digits[1].tensors[0].mean())) < 0.1


def test_build_data_digits(digits) -> None:
    splits = build_data(DataConfig(name="digits"))
    assert (splits.num_classes, splits.input_shape) == (10, (1, 8, 8))
    assert torch.equal(splits.test.tensors[0], digits[2].tensors[0])


# --- synthetic -------------------------------------------------------------------------


def test_synthetic_deterministic_per_seed() -> None:
    a = make_synthetic(num_samples=200, shape=(4, 4), num_classes=5, seed=3)
    b = make_synthetic(num_samples=200, shape=(4, 4), num_classes=5, seed=3)
    c = make_synthetic(num_samples=200, shape=(4, 4), num_classes=5, seed=4)
    assert torch.equal(a.tensors[0], b.tensors[0]) and torch.equal(a.tensors[1], b.tensors[1])
    assert not torch.equal(a.tensors[0], c.tensors[0])
    assert a.tensors[0].shape == (200, 4, 4) and a.num_classes == 5


@pytest.mark.slow
def test_synthetic_is_learnable() -> None:
    ds = make_synthetic(num_samples=512, shape=(1, 4, 4), num_classes=4, seed=0)
    x, y = ds.tensors
    counts = Counter(y.tolist())
    assert set(counts) == {0, 1, 2, 3}
    assert max(counts.values()) < 0.6 * len(y)
    # Labels come from a linear teacher: a linear model fits them well.
    torch.manual_seed(0)
    model = nn.Linear(16, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(200):
        loss = nn.functional.cross_entropy(model(x.flatten(1)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    acc = (model(x.flatten(1)).argmax(1) == y).float().mean()
    assert acc > 0.9


@pytest.mark.parametrize("kwargs", [{"num_samples": 0}, {"num_classes": 1}, {"shape": [1, 0, 4]}])
def test_synthetic_rejects_bad_kwargs(kwargs) -> None:
    with pytest.raises(UserError, match="^data.kwargs:"):
        build_data(DataConfig(name="synthetic", kwargs=kwargs))


# --- split_off / build_data with user data ---------------------------------------------


def test_split_off_is_fixed_disjoint_and_covering() -> None:
    ds = TensorDataset(torch.arange(40.0), torch.arange(40) % 3)
    train, val = split_off(ds, 0.25)
    assert (len(train), len(val)) == (30, 10)
    assert not set(train.indices) & set(val.indices)
    assert sorted(train.indices + val.indices) == list(range(40))
    train2, val2 = split_off(ds, 0.25)
    assert (train2.indices, val2.indices) == (train.indices, val.indices)
    assert train.indices != sorted(train.indices)  # shuffled, not the first 30
    assert torch.equal(targets_of(val), (torch.tensor(val.indices) % 3))


USER_DATA = """
import torch
from torch.utils.data import TensorDataset

def make(n=40, label=None):
    y = torch.arange(n) % 3 if label is None else torch.full((n,), label)
    return TensorDataset(torch.randn(n, 2, 5), y)

def one(n=40, label=None):
    return make(n, label)

TRAIN, VAL, TEST = make(30), make(7), make(5)

def pair():
    return TRAIN, VAL

def triple():
    return [TRAIN, VAL, TEST]

def as_dict():
    return {"train": TRAIN, "test": TEST}

def bad_dict():
    return {"train": TRAIN, "valid": VAL}

def no_train():
    return {"val": VAL}

def number():
    return 5

def four():
    return (TRAIN, VAL, TEST, TEST)

def empty_val():
    return TRAIN, make(0)

class Plain:
    def __init__(self, n=12):
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        return torch.full((3,), float(i)), i % 2
"""


def test_build_data_one_dataset_gets_a_fixed_val_split(user_module) -> None:
    mod = user_module(USER_DATA)
    cfg = DataConfig(name=f"{mod}:one", val_fraction=0.25)
    splits = build_data(cfg)
    assert isinstance(splits.train, Subset) and isinstance(splits.val, Subset)
    assert splits.train.dataset is splits.val.dataset
    assert (len(splits.train), len(splits.val)) == (30, 10)
    assert not set(splits.train.indices) & set(splits.val.indices)
    assert sorted(splits.train.indices + splits.val.indices) == list(range(40))
    assert splits.test is None
    # Integer targets in a TensorDataset: the class count is learned from them.
    assert splits.num_classes == 3 and splits.input_shape == (2, 5)
    again = build_data(cfg)
    assert again.val.indices == splits.val.indices


def test_build_data_plain_class_and_kwargs(user_module) -> None:
    mod = user_module(USER_DATA)
    splits = build_data(
        DataConfig(name=f"{mod}:Plain", kwargs={"n": 20}, val_fraction=0.1, num_classes=2)
    )
    assert (len(splits.train), len(splits.val)) == (18, 2)
    assert splits.num_classes == 2 and splits.input_shape == (3,)


@pytest.mark.parametrize(
    "attr, want",
    [
        ("pair", ("TRAIN", "VAL", None)),
        ("triple", ("TRAIN", "VAL", "TEST")),
        ("as_dict", ("TRAIN", None, "TEST")),
    ],
)
def test_build_data_uses_given_splits(user_module, attr, want) -> None:
    mod = user_module(USER_DATA)
    splits = build_data(DataConfig(name=f"{mod}:{attr}", num_classes=3))
    module = sys.modules[mod]
    expected = [None if w is None else getattr(module, w) for w in want]
    assert splits.train is expected[0]
    assert splits.val is expected[1]
    assert splits.test is expected[2]
    assert splits.num_classes == 3


@pytest.mark.parametrize(
    "attr, match",
    [
        ("bad_dict", r"keys \['train', 'valid'\]"),
        ("no_train", r"keys \['val'\]"),
        ("number", "returned int, not a Dataset"),
        ("four", "returned 4 data sets"),
    ],
)
def test_build_data_rejects_bad_returns(user_module, attr, match) -> None:
    mod = user_module(USER_DATA)
    with pytest.raises(UserError, match=match) as info:
        build_data(DataConfig(name=f"{mod}:{attr}"))
    assert str(info.value).startswith("data.name:")


def test_build_data_empty_splits_are_named(user_module) -> None:
    mod = user_module(USER_DATA)
    with pytest.raises(UserError, match="the train split .* is empty"):
        build_data(DataConfig(name=f"{mod}:one", kwargs={"n": 0}))
    with pytest.raises(UserError, match="the val split .* is empty"):
        build_data(DataConfig(name=f"{mod}:empty_val"))


def test_build_data_import_errors(user_module) -> None:
    mod = user_module(USER_DATA)
    with pytest.raises(UserError, match="^data.name: cannot import module"):
        build_data(DataConfig(name="tw_no_such_data_xyz:make"))
    with pytest.raises(UserError, match="^data.name: .*no attribute"):
        build_data(DataConfig(name=f"{mod}:nope"))
    with pytest.raises(UserError, match="^data.kwargs:"):
        build_data(DataConfig(name=f"{mod}:one", kwargs={"size": 3}))


def test_build_data_checks_labels_against_num_classes(user_module) -> None:
    mod = user_module(USER_DATA)
    with pytest.raises(UserError, match="labels out of range: the (train|val) split"):
        build_data(DataConfig(name=f"{mod}:one", num_classes=2))  # labels 0..2
    splits = build_data(DataConfig(name=f"{mod}:one", num_classes=3))
    assert splits.num_classes == 3


# --- check_labels ----------------------------------------------------------------------


def _labelled(*labels: int) -> TensorDataset:
    return TensorDataset(torch.zeros(len(labels), 2), torch.tensor(labels))


@pytest.mark.parametrize(
    "labels, lo, hi", [((0, 1, -1), -1, 1), ((0, 3, 2), 0, 3), ((-2, 9), -2, 9)]
)
def test_check_labels_out_of_range(labels, lo, hi) -> None:
    with pytest.raises(UserError) as info:
        check_labels(_labelled(*labels), 3, "val")
    msg = str(info.value)
    assert "the val split" in msg and "[0, 3)" in msg
    assert f"min {lo}, max {hi}" in msg


@pytest.mark.slow
def test_check_labels_passes_valid_and_unreadable() -> None:
    assert check_labels(_labelled(0, 1, 2, 2), 3, "train") is None
    assert check_labels(None, 3, "test") is None
    floats = TensorDataset(torch.zeros(2, 2), torch.tensor([[0.2, 0.8], [1.0, 5.0]]))
    assert check_labels(floats, 2, "train") is None


@pytest.mark.slow
def test_check_labels_of_subset_sees_only_its_indices() -> None:
    ds = _labelled(0, 1, 7, 2)
    assert check_labels(Subset(ds, [0, 1, 3]), 3, "train") is None
    with pytest.raises(UserError, match="the train split has 1 targets"):
        check_labels(Subset(ds, [2, 3]), 3, "train")


@pytest.mark.slow
def test_check_labels_of_empty_subset() -> None:
    # Reachable through trainwell.fit(val_data=Subset(ds, [])): _preflight checks labels.
    empty = Subset(_labelled(0, 1), [])
    assert targets_of(empty).numel() == 0
    assert check_labels(empty, 2, "val") is None


# --- early stopping --------------------------------------------------------------------


def test_early_stopping_min_mode_with_delta_and_patience() -> None:
    es = EarlyStopping("val/loss", "min", patience=2, min_delta=0.1)
    assert es.update(1.0) is True
    assert es.update(0.95) is False  # better, but by less than min_delta
    assert (es.best, es.bad_evals, es.should_stop) == (1.0, 1, False)
    assert es.update(0.85) is True
    assert (es.best, es.bad_evals) == (0.85, 0)
    assert es.update(0.9) is False
    assert not es.should_stop
    assert es.update(0.76) is False  # 0.85 - 0.1 = 0.75 is the bar
    assert es.should_stop


def test_early_stopping_max_mode() -> None:
    es = EarlyStopping("val/accuracy", "max", patience=1, min_delta=0.01)
    assert [es.update(v) for v in (0.5, 0.6, 0.605)] == [True, True, False]
    assert es.best == 0.6 and es.should_stop
    assert es.update(0.7) is True and not es.should_stop


def test_early_stopping_patience_zero_never_stops() -> None:
    es = EarlyStopping("val/loss", "min", patience=0, min_delta=0.0)
    for v in (1.0, 2.0, 3.0, 4.0, 5.0):
        es.update(v)
    assert es.bad_evals == 4 and not es.should_stop


def test_early_stopping_state_round_trip(tmp_path: Path) -> None:
    from trainwell.engine.checkpointing.checkpoint import save_atomic

    es = EarlyStopping("val/loss", "min", patience=3, min_delta=0.0)
    for v in (1.0, 0.5, 0.7, 0.8):
        es.update(v)
    save_atomic({"model": {}, "early_stop": es.state_dict()}, tmp_path / "c.pt")
    state = torch.load(tmp_path / "c.pt", weights_only=True)["early_stop"]

    fresh = EarlyStopping("val/loss", "min", patience=3, min_delta=0.0)
    fresh.load_state_dict(state)
    assert (fresh.best, fresh.bad_evals) == (0.5, 2)
    assert fresh.update(0.9) is False and fresh.should_stop
    assert es.update(0.9) is False and es.should_stop

    unseen = EarlyStopping("val/loss", "min", patience=3, min_delta=0.0)
    unseen.load_state_dict(unseen.state_dict())
    assert unseen.best == float("inf") and unseen.update(123.0) is True


# --- seeding ---------------------------------------------------------------------------


def _draw() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3)


def test_seed_everything_repeats_all_rngs() -> None:
    seed_everything(1234)
    a = _draw()
    seed_everything(1234)
    b = _draw()
    seed_everything(1235)
    c = _draw()
    assert a[:2] == b[:2] and torch.equal(a[2], b[2])
    assert a[0] != c[0] and a[1] != c[1] and not torch.equal(a[2], c[2])


def test_seed_everything_accepts_large_seeds() -> None:
    seed_everything(2**40 + 5)
    a = _draw()
    seed_everything(2**40 + 5)
    b = _draw()
    assert a[:2] == b[:2] and torch.equal(a[2], b[2])
