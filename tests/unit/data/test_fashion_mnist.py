"""Tests for trainwell.data.idx: IDX reading and the Fashion-MNIST loader, on tiny files."""

from __future__ import annotations

import gzip
import math
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from trainwell.data.idx import (
    FASHION_MNIST_FILES,
    FASHION_MNIST_URL,
    load_fashion_mnist,
    read_idx,
)
from trainwell.errors import UserError

TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS = FASHION_MNIST_FILES

_CODES = {
    np.dtype(np.uint8): 0x08,
    np.dtype(np.int8): 0x09,
    np.dtype(np.int16): 0x0B,
    np.dtype(np.int32): 0x0C,
    np.dtype(np.float32): 0x0D,
    np.dtype(np.float64): 0x0E,
}


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode ``array`` as IDX, written independently of the reader under test."""
    array = np.asarray(array)
    header = bytes([0, 0, _CODES[array.dtype], array.ndim])
    header += b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_idx(path: Path, array: np.ndarray, gz: bool = False) -> Path:
    data = idx_bytes(array)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def make_images(n: int, height: int = 28, width: int = 28, seed: int = 0) -> np.ndarray:
    """Random images that can be traced back to their file index after normalization.

    Pixel [0, 0] holds the image's index and pixels [0, 1] / [0, 2] hold 0 and 255, so
    the affine normalization can be inverted exactly from each image alone.
    """
    images = np.random.default_rng(seed).integers(0, 256, size=(n, height, width), dtype=np.uint8)
    images[:, 0, 0] = np.arange(n)
    images[:, 0, 1] = 0
    images[:, 0, 2] = 255
    return images


def write_fashion(
    root: Path,
    gz: bool = False,
    n_train: int = 60,
    n_test: int = 20,
    height: int = 28,
    width: int = 28,
) -> dict[str, np.ndarray]:
    """Write the four Fashion-MNIST files (tiny) into ``root``; return the arrays written."""
    root.mkdir(parents=True, exist_ok=True)
    arrays = {
        TRAIN_IMAGES: make_images(n_train, height, width, seed=1),
        TRAIN_LABELS: (np.arange(n_train) % 10).astype(np.uint8),
        TEST_IMAGES: make_images(n_test, height, width, seed=2),
        TEST_LABELS: (np.arange(n_test) % 10).astype(np.uint8),
    }
    for name, array in arrays.items():
        write_idx(root / (f"{name}.gz" if gz else name), array, gz=gz)
    return arrays


def recover(images: torch.Tensor) -> tuple[np.ndarray, float, float]:
    """Invert the normalization: raw uint8 images [N, H, W], and the (mean, std) used."""
    z = images[:, 0].double().numpy()
    z0, z255 = z[:, 0, 1], z[:, 0, 2]
    # z = (p / 255 - mean) / std, so z255 - z0 = 1 / std and z0 = -mean / std.
    std = 1.0 / (z255 - z0)
    mean = -z0 * std
    assert np.allclose(std, std[0]) and np.allclose(mean, mean[0])
    raw = np.rint(((z * std[:, None, None]) + mean[:, None, None]) * 255.0)
    return raw.astype(np.uint8), float(mean[0]), float(std[0])


# --- read_idx -----------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_read_idx_round_trip(tmp_path, dtype, gz):
    rng = np.random.default_rng(0)
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
    if info is not None:
        # Extremes included: a byte-order mistake shows up on multi-byte values.
        array = rng.integers(info.min, info.max, size=(3, 4, 5), endpoint=True, dtype=dtype)
        array.flat[0], array.flat[1] = info.min, info.max
    else:
        array = (rng.standard_normal((3, 4, 5)) * 1e3).astype(dtype)
    path = write_idx(tmp_path / ("a.idx.gz" if gz else "a.idx"), array, gz=gz)

    out = read_idx(path)

    assert out.dtype == np.dtype(dtype)
    assert out.dtype.isnative
    assert out.shape == (3, 4, 5)
    np.testing.assert_array_equal(out, array)
    assert out.flags.writeable


def test_read_idx_one_dimension_and_str_path(tmp_path):
    labels = np.array([3, 1, 4, 1, 5], dtype=np.uint8)
    path = write_idx(tmp_path / "labels", labels)
    np.testing.assert_array_equal(read_idx(str(path)), labels)


def test_read_idx_detects_gzip_by_content_not_name(tmp_path):
    array = np.arange(24, dtype=np.int16).reshape(2, 3, 4) - 7
    gz_without_suffix = write_idx(tmp_path / "compressed", array, gz=True)
    plain_with_suffix = write_idx(tmp_path / "plain.gz", array, gz=False)
    np.testing.assert_array_equal(read_idx(gz_without_suffix), array)
    np.testing.assert_array_equal(read_idx(plain_with_suffix), array)


def test_read_idx_missing_file(tmp_path):
    path = tmp_path / "nope-idx1-ubyte"
    with pytest.raises(UserError, match="nope-idx1-ubyte") as err:
        read_idx(path)
    assert "\n" not in str(err.value)


def test_read_idx_bad_magic(tmp_path):
    path = tmp_path / "bad"
    path.write_bytes(b"\x12\x34" + idx_bytes(np.zeros(4, np.uint8))[2:])
    with pytest.raises(UserError, match="magic") as err:
        read_idx(path)
    assert str(path) in str(err.value)


def test_read_idx_unknown_dtype(tmp_path):
    data = bytearray(idx_bytes(np.zeros(4, np.uint8)))
    data[2] = 0x0A
    path = tmp_path / "badtype"
    path.write_bytes(bytes(data))
    with pytest.raises(UserError, match="0x0A") as err:
        read_idx(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_read_idx_truncated(tmp_path, gz):
    data = idx_bytes(np.zeros((2, 3), np.int32))  # 8 header bytes + 24 data bytes
    path = tmp_path / "short"
    path.write_bytes(gzip.compress(data[:-5]) if gz else data[:-5])
    with pytest.raises(UserError, match="truncated") as err:
        read_idx(path)
    message = str(err.value)
    assert str(path) in message
    assert "24" in message and "19" in message  # expected vs found bytes


def test_read_idx_truncated_gzip_stream(tmp_path):
    compressed = gzip.compress(idx_bytes(np.arange(1000, dtype=np.int32)))
    path = tmp_path / "cut.gz"
    path.write_bytes(compressed[: len(compressed) // 2])
    with pytest.raises(UserError, match="gzip") as err:
        read_idx(path)
    assert str(path) in str(err.value)


def test_read_idx_truncated_header(tmp_path):
    path = tmp_path / "header"
    path.write_bytes(bytes([0, 0, 0x08, 3]) + struct.pack(">I", 2))
    with pytest.raises(UserError, match="truncated header") as err:
        read_idx(path)
    assert str(path) in str(err.value)


def test_read_idx_trailing_garbage(tmp_path):
    path = tmp_path / "long"
    path.write_bytes(idx_bytes(np.zeros(4, np.uint8)) + b"junk")
    with pytest.raises(UserError, match="trailing") as err:
        read_idx(path)
    assert str(path) in str(err.value)
    assert "\n" not in str(err.value)


# --- load_fashion_mnist: the good path ----------------------------------------------------


def test_load_shapes_and_dtypes(tmp_path):
    write_fashion(tmp_path)
    train, val, test = load_fashion_mnist(tmp_path)

    assert (len(train), len(val), len(test)) == (50, 10, 20)  # 1 of the 6 per class goes to val
    for ds in (train, val, test):
        images, labels = ds.tensors
        assert images.dtype == torch.float32
        assert labels.dtype == torch.int64
        assert images.shape[1:] == (1, 28, 28)
        assert images.is_contiguous()
    x, y = train[0]
    assert x.shape == (1, 28, 28) and y.ndim == 0


def test_load_takes_image_size_from_file(tmp_path):
    write_fashion(tmp_path, height=7, width=5)
    train, val, test = load_fashion_mnist(str(tmp_path))
    for ds in (train, val, test):
        assert ds.tensors[0].shape[1:] == (1, 7, 5)


def test_normalized_with_train_statistics(tmp_path):
    arrays = write_fashion(tmp_path)
    train, val, test = load_fashion_mnist(tmp_path)

    x_train = train.tensors[0].double()
    assert abs(x_train.mean().item()) < 1e-5
    assert abs(x_train.std(unbiased=False).item() - 1.0) < 1e-5

    raw_train, mean, std = recover(train.tensors[0])
    # The statistics are those of the train split's own pixels, not val's or test's.
    assert mean == pytest.approx(raw_train.mean() / 255.0, abs=1e-5)
    assert std == pytest.approx((raw_train / 255.0).std(), abs=1e-5)
    for ds in (val, test):
        _, other_mean, other_std = recover(ds.tensors[0])
        assert other_mean == pytest.approx(mean, abs=1e-5)
        assert other_std == pytest.approx(std, abs=1e-5)

    raw_test, _, _ = recover(test.tensors[0])
    np.testing.assert_array_equal(raw_test, arrays[TEST_IMAGES])
    np.testing.assert_array_equal(test.tensors[1].numpy(), arrays[TEST_LABELS])


def test_val_is_stratified_disjoint_and_covers_training_file(tmp_path):
    arrays = write_fashion(tmp_path)
    train, val, _ = load_fashion_mnist(tmp_path, val_fraction=0.1)

    raw_train, _, _ = recover(train.tensors[0])
    raw_val, _, _ = recover(val.tensors[0])
    train_ids = raw_train[:, 0, 0].astype(int)
    val_ids = raw_val[:, 0, 0].astype(int)

    assert len(set(train_ids)) == len(train_ids) and len(set(val_ids)) == len(val_ids)
    assert not set(train_ids) & set(val_ids)
    assert sorted(set(train_ids) | set(val_ids)) == list(range(60))
    # Images and labels stay paired, and match the file.
    np.testing.assert_array_equal(raw_train, arrays[TRAIN_IMAGES][train_ids])
    np.testing.assert_array_equal(raw_val, arrays[TRAIN_IMAGES][val_ids])
    np.testing.assert_array_equal(train.tensors[1].numpy(), arrays[TRAIN_LABELS][train_ids])
    np.testing.assert_array_equal(val.tensors[1].numpy(), arrays[TRAIN_LABELS][val_ids])
    # 6 of each class, 10% -> exactly one of each class in val.
    np.testing.assert_array_equal(np.bincount(val.tensors[1].numpy(), minlength=10), [1] * 10)


def test_val_fraction_scales_per_class(tmp_path):
    write_fashion(tmp_path)
    _, val, _ = load_fashion_mnist(tmp_path, val_fraction=0.5)
    np.testing.assert_array_equal(np.bincount(val.tensors[1].numpy(), minlength=10), [3] * 10)


def _val_ids(root: Path, seed: int) -> list[int]:
    _, val, _ = load_fashion_mnist(root, split_seed=seed)
    return sorted(recover(val.tensors[0])[0][:, 0, 0].astype(int).tolist())


def test_split_is_deterministic_per_seed(tmp_path):
    write_fashion(tmp_path)
    first = _val_ids(tmp_path, seed=0)
    assert _val_ids(tmp_path, seed=0) == first
    # Each seed picks 1 of 6 per class: two seeds agree on all 10 with chance 6**-10.
    assert _val_ids(tmp_path, seed=1) != first
    assert _val_ids(tmp_path, seed=1) == _val_ids(tmp_path, seed=1)


def test_gzipped_files_load_the_same(tmp_path):
    write_fashion(tmp_path / "plain")
    write_fashion(tmp_path / "gz", gz=True)
    assert sorted(p.name for p in (tmp_path / "gz").iterdir()) == sorted(
        f"{name}.gz" for name in FASHION_MNIST_FILES
    )
    for a, b in zip(load_fashion_mnist(tmp_path / "plain"), load_fashion_mnist(tmp_path / "gz")):
        for ta, tb in zip(a.tensors, b.tensors):
            assert torch.equal(ta, tb)


# --- load_fashion_mnist: bad input ----------------------------------------------------------


def _single_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


def test_missing_folder(tmp_path):
    root = tmp_path / "no-such-folder"
    with pytest.raises(UserError) as err:
        load_fashion_mnist(root)
    message = _single_line(err)
    assert str(root) in message
    assert FASHION_MNIST_URL in message
    assert all(name in message for name in FASHION_MNIST_FILES)


def test_missing_one_file(tmp_path):
    write_fashion(tmp_path)
    (tmp_path / TEST_LABELS).unlink()
    with pytest.raises(UserError) as err:
        load_fashion_mnist(tmp_path)
    message = _single_line(err)
    assert str(tmp_path) in message
    assert TEST_LABELS in message
    assert TRAIN_IMAGES not in message  # only what is actually missing
    assert FASHION_MNIST_URL in message and "data.root" in message


def test_truncated_images_file(tmp_path):
    write_fashion(tmp_path)
    path = tmp_path / TRAIN_IMAGES
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(UserError, match="truncated") as err:
        load_fashion_mnist(tmp_path)
    assert str(path) in _single_line(err)


def test_bad_magic(tmp_path):
    write_fashion(tmp_path)
    path = tmp_path / TEST_IMAGES
    path.write_bytes(b"PK" + path.read_bytes()[2:])
    with pytest.raises(UserError, match="magic") as err:
        load_fashion_mnist(tmp_path)
    assert str(path) in _single_line(err)


def test_trailing_garbage(tmp_path):
    write_fashion(tmp_path)
    path = tmp_path / TRAIN_LABELS
    path.write_bytes(path.read_bytes() + b"\x00\x00")
    with pytest.raises(UserError, match="trailing") as err:
        load_fashion_mnist(tmp_path)
    assert str(path) in _single_line(err)


def test_count_mismatch(tmp_path):
    write_fashion(tmp_path)
    write_idx(tmp_path / TRAIN_LABELS, (np.arange(59) % 10).astype(np.uint8))
    with pytest.raises(UserError) as err:
        load_fashion_mnist(tmp_path)
    message = _single_line(err)
    assert TRAIN_IMAGES in message and TRAIN_LABELS in message
    assert "60" in message and "59" in message


def test_label_out_of_range(tmp_path):
    write_fashion(tmp_path)
    labels = (np.arange(20) % 10).astype(np.uint8)
    labels[7] = 10
    write_idx(tmp_path / TEST_LABELS, labels)
    with pytest.raises(UserError, match="label 10") as err:
        load_fashion_mnist(tmp_path)
    assert str(tmp_path / TEST_LABELS) in _single_line(err)


def test_images_not_3d(tmp_path):
    write_fashion(tmp_path)
    write_idx(tmp_path / TRAIN_IMAGES, make_images(60).reshape(60, 28 * 28))
    with pytest.raises(UserError, match="3-D") as err:
        load_fashion_mnist(tmp_path)
    assert str(tmp_path / TRAIN_IMAGES) in _single_line(err)


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5, math.nan, True, "0.1"])
def test_val_fraction_out_of_range(tmp_path, fraction):
    write_fashion(tmp_path)
    with pytest.raises(UserError, match="val_fraction") as err:
        load_fashion_mnist(tmp_path, val_fraction=fraction)
    _single_line(err)


@pytest.mark.parametrize("fraction, side", [(0.01, "val"), (0.95, "train")])
def test_val_fraction_empties_a_class(tmp_path, fraction, side):
    write_fashion(tmp_path)
    with pytest.raises(UserError, match=f"empty in {side}") as err:
        load_fashion_mnist(tmp_path, val_fraction=fraction)
    message = _single_line(err)
    assert "val_fraction" in message and TRAIN_LABELS in message


# --- through the engine -------------------------------------------------------------------


@pytest.mark.slow
def test_train_on_fashion_mnist_files_end_to_end(tmp_path, cli):
    write_fashion(tmp_path / "fm", gz=True, n_train=200, n_test=40)
    code, out, err = cli(
        "train", "data.name=fashion_mnist", "data.root=fm", "data.batch_size=16",
        "train.epochs=1", "run.dir=run", "model.kwargs.channels=[4,8]",
    )  # fmt: skip
    assert code == 0, err
    import json

    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["steps_per_epoch"] == 180 // 16  # 20 of 200 held out for validation
    assert 0.0 <= summary["test"]["accuracy"] <= 1.0


def test_missing_fashion_mnist_files_say_where_to_put_them(tmp_path, cli):
    code, _, err = cli("train", "data.name=fashion_mnist", "data.root=nowhere")
    assert code == 2
    assert "nowhere" in err and "data.root" in err and len(err.strip().splitlines()) == 1
