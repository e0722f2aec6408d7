"""Reading IDX files (the MNIST format) and loading Fashion-MNIST from a local folder.

IDX is the format of MNIST and Fashion-MNIST: two zero bytes, a byte naming the element
type, a byte with the number of dimensions, each dimension as a big-endian uint32, then
the data in big-endian order. The files are often shipped gzipped; :func:`read_idx`
accepts both forms and tells them apart by content, not by name.

Nothing here downloads: :func:`load_fashion_mnist` reads the four standard files from a
folder and, when something is missing or malformed, raises a :class:`UserError` with one
line that names the file, what is wrong and how to fix it.

Example:
    >>> train, val, test = load_fashion_mnist("~/data/fashion-mnist")  # doctest: +SKIP
    >>> x, y = train[0]  # doctest: +SKIP
    >>> x.shape, x.dtype, y.dtype  # doctest: +SKIP
    (torch.Size([1, 28, 28]), torch.float32, torch.int64)
"""

from __future__ import annotations

import gzip
import math
import numbers
import zlib
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from trainwell.errors import UserError

__all__ = [
    "FASHION_MNIST_FILES",
    "FASHION_MNIST_URL",
    "load_fashion_mnist",
    "read_idx",
]

# IDX type codes -> big-endian numpy dtypes. Single bytes have no byte order, the rest
# are stored most significant byte first whatever the machine that wrote them.
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_GZIP_MAGIC = b"\x1f\x8b"

#: The four standard Fashion-MNIST file names, in the order (train images, train labels,
#: test images, test labels). Each may be present as-is or with a ``.gz`` suffix.
FASHION_MNIST_FILES: tuple[str, str, str, str] = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

#: Where the files can be downloaded by hand (nothing in trainwell downloads them).
FASHION_MNIST_URL = "https://github.com/zalandoresearch/fashion-mnist#get-the-data"

_NUM_CLASSES = 10


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped if they are gzip, with at least an IDX magic number."""
    if not path.exists():
        raise UserError(f"{path}: no such file; check the path")
    if not path.is_file():
        raise UserError(f"{path}: is not a regular file; expected an IDX file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            # A cut-off download is the usual cause; gzip's own message is cryptic.
            raise UserError(
                f"{path}: corrupt or truncated gzip data ({exc}); download the file again"
            ) from exc
    if len(raw) < 4:
        raise UserError(
            f"{path}: too short to be an IDX file ({len(raw)} bytes, the header alone is "
            "at least 4); download the file again"
        )
    if raw[0] != 0 or raw[1] != 0:
        raise UserError(
            f"{path}: bad magic bytes {raw[:4].hex()} (an IDX file starts with 0x0000, "
            "a gzip file with 0x1f8b); is this the right file?"
        )
    return raw


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file, plain or gzipped, into a numpy array.

    The array has the file's shape and element type in the machine's native byte order
    (``uint8``, ``int8``, ``int16``, ``int32``, ``float32`` or ``float64``). Gzip is
    detected from the file's first bytes, so a compressed file without ``.gz`` in its
    name (or a plain one with it) is read correctly.

    Raises:
        UserError: the file is missing, is not gzip/IDX (bad magic, unknown type code),
            is truncated, or has bytes after the data. The message names the file.

    Example:
        >>> images = read_idx("data/train-images-idx3-ubyte.gz")  # doctest: +SKIP
        >>> images.shape, images.dtype  # doctest: +SKIP
        ((60000, 28, 28), dtype('uint8'))
    """
    path = Path(path).expanduser()
    raw = _read_bytes(path)
    code, ndim = raw[2], raw[3]
    dtype = _IDX_DTYPES.get(code)
    if dtype is None:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise UserError(
            f"{path}: unknown IDX type code 0x{code:02X} (known: {known}); is this the right file?"
        )
    if ndim == 0:
        raise UserError(f"{path}: IDX header declares 0 dimensions; is this the right file?")

    header_size = 4 + 4 * ndim
    if len(raw) < header_size:
        raise UserError(
            f"{path}: truncated header: {ndim} dimensions need {header_size} bytes, "
            f"found {len(raw)}; download the file again"
        )
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    # Python ints: the product of uint32 dimensions can overflow a fixed-width integer.
    expected = math.prod(shape) * dtype.itemsize
    found = len(raw) - header_size
    if found < expected:
        raise UserError(
            f"{path}: truncated data: shape {shape} needs {expected} bytes after the header, "
            f"found {found}; download the file again"
        )
    if found > expected:
        raise UserError(
            f"{path}: {found - expected} bytes of trailing garbage after the data "
            f"(shape {shape} needs {expected} bytes, found {found}); download the file again"
        )

    data = np.frombuffer(raw, dtype=dtype, count=math.prod(shape), offset=header_size)
    # astype copies into native byte order: the result is writable and owns its memory
    # instead of pinning the whole file's bytes.
    return data.astype(dtype.newbyteorder("="), copy=True).reshape(shape)


def _missing_files_error(root: Path, missing: list[str], reason: str) -> UserError:
    names = ", ".join(f"{name}[.gz]" for name in missing)
    return UserError(
        f"Fashion-MNIST: {reason} {root} (missing: {names}); download the four files from "
        f"{FASHION_MNIST_URL} into {root}, or set data.root"
    )


def _locate_files(root: Path) -> list[Path]:
    """Return the paths of :data:`FASHION_MNIST_FILES` under ``root``, plain or ``.gz``."""
    if not root.is_dir():
        reason = "not a folder:" if root.exists() else "folder does not exist:"
        raise _missing_files_error(root, list(FASHION_MNIST_FILES), reason)
    found: list[Path] = []
    missing: list[str] = []
    for name in FASHION_MNIST_FILES:
        # The uncompressed file wins when both exist: it reads faster and someone
        # went to the trouble of unpacking it.
        for candidate in (root / name, root / f"{name}.gz"):
            if candidate.is_file():
                found.append(candidate)
                break
        else:
            missing.append(name)
    if missing:
        raise _missing_files_error(root, missing, "files missing in")
    return found


def _check_pair(images: np.ndarray, labels: np.ndarray, image_path: Path, label_path: Path) -> None:
    if images.ndim != 3:
        raise UserError(
            f"{image_path}: expected 3-D images [count, height, width], got shape "
            f"{images.shape}; is this an images file?"
        )
    if images.dtype != np.uint8:
        raise UserError(
            f"{image_path}: expected unsigned byte pixels (IDX type 0x08), got "
            f"{images.dtype}; is this a Fashion-MNIST images file?"
        )
    if labels.ndim != 1:
        raise UserError(
            f"{label_path}: expected 1-D labels [count], got shape {labels.shape}; "
            "is this a labels file?"
        )
    if labels.dtype.kind not in "iu":
        raise UserError(
            f"{label_path}: expected integer labels, got {labels.dtype}; is this a labels file?"
        )
    if len(images) != len(labels):
        raise UserError(
            f"{image_path} has {len(images)} images but {label_path} has {len(labels)} "
            "labels; the two files must come from the same split and download"
        )
    bad = np.flatnonzero((labels < 0) | (labels >= _NUM_CLASSES))
    if bad.size:
        i = int(bad[0])
        raise UserError(
            f"{label_path}: label {int(labels[i])} at index {i} is outside [0, "
            f"{_NUM_CLASSES - 1}] ({bad.size} such labels); is this a Fashion-MNIST labels file?"
        )


def _stratified_split(
    labels: np.ndarray, val_fraction: float, seed: int, label_path: Path
) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, val), each sorted, with ``val_fraction`` of every class in val."""
    rng = np.random.default_rng(seed)
    train_parts: list[np.ndarray] = []
    val_parts: list[np.ndarray] = []
    # Classes in sorted order and one generator: the split depends only on the labels
    # and the seed, never on dict or set ordering.
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        # Round half up (not Python's round-half-even) so 6 * 0.25 = 1.5 -> 2, predictably.
        n_val = math.floor(len(members) * val_fraction + 0.5)
        if n_val == 0 or n_val == len(members):
            side = "val" if n_val == 0 else "train"
            raise UserError(
                f"{label_path}: val_fraction={val_fraction} leaves class {int(cls)} "
                f"({len(members)} examples) empty in {side}; choose a val_fraction "
                "between 1/N and 1 - 1/N for the smallest class of N examples"
            )
        val_parts.append(members[:n_val])
        train_parts.append(members[n_val:])
    # Sorted so the splits keep the file's order; shuffling is the DataLoader's job.
    return np.sort(np.concatenate(train_parts)), np.sort(np.concatenate(val_parts))


def load_fashion_mnist(
    root: str | Path, val_fraction: float = 0.1, split_seed: int = 0
) -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    """Load Fashion-MNIST from ``root`` as (train, val, test) datasets.

    ``root`` holds the four :data:`FASHION_MNIST_FILES`, each plain or gzipped. The
    validation split is a stratified ``val_fraction`` of the training file (the same
    ``split_seed`` always gives the same split); the test split is the ``t10k`` files.

    Each dataset is a :class:`~torch.utils.data.TensorDataset` of images, float32 of
    shape ``[N, 1, H, W]`` (H and W read from the files), and labels, int64 in [0, 9].
    Pixels are scaled to [0, 1], then standardized with the mean and std of the *train*
    split only, so nothing about val or test leaks into the inputs.

    Raises:
        UserError: the folder or a file is missing (the message says where to get
            them), a file is malformed, image and label counts differ, a label is
            outside [0, 9], or ``val_fraction`` is not in (0, 1) or empties a class.

    Example:
        >>> train, val, test = load_fashion_mnist("data/fashion-mnist")  # doctest: +SKIP
        >>> len(train), len(val), len(test)  # doctest: +SKIP
        (54000, 6000, 10000)
        >>> train.tensors[0].shape  # doctest: +SKIP
        torch.Size([54000, 1, 28, 28])
    """
    # bool is an int subclass and NaN fails every comparison: reject both explicitly.
    if (
        isinstance(val_fraction, bool)
        or not isinstance(val_fraction, numbers.Real)
        or not 0.0 < val_fraction < 1.0
    ):
        raise UserError(
            f"val_fraction: expected a number strictly between 0 and 1, got {val_fraction!r}"
        )
    root = Path(root).expanduser()
    train_img_path, train_lbl_path, test_img_path, test_lbl_path = _locate_files(root)

    train_images, train_labels = read_idx(train_img_path), read_idx(train_lbl_path)
    test_images, test_labels = read_idx(test_img_path), read_idx(test_lbl_path)
    _check_pair(train_images, train_labels, train_img_path, train_lbl_path)
    _check_pair(test_images, test_labels, test_img_path, test_lbl_path)
    if train_images.shape[1:] != test_images.shape[1:]:
        raise UserError(
            f"{test_img_path}: images are {test_images.shape[1:]} but the training images "
            f"in {train_img_path} are {train_images.shape[1:]}; use files from one download"
        )

    train_idx, val_idx = _stratified_split(
        train_labels, float(val_fraction), split_seed, train_lbl_path
    )

    def scaled(images: np.ndarray) -> np.ndarray:
        return images.astype(np.float32) / np.float32(255.0)

    x_train = scaled(train_images[train_idx])
    # float64 accumulation: a float32 sum over ~47M pixels loses digits.
    mean = float(x_train.mean(dtype=np.float64))
    std = float(x_train.std(dtype=np.float64))
    if not std > 0.0:
        raise UserError(
            f"{train_img_path}: every training pixel has the same value, so the images "
            "cannot be normalized; is this the right file?"
        )

    def dataset(images: np.ndarray, labels: np.ndarray) -> TensorDataset:
        x = (images - np.float32(mean)) / np.float32(std)
        # [N, H, W] -> [N, 1, H, W]: one channel, as convolutional models expect.
        return TensorDataset(
            torch.from_numpy(np.ascontiguousarray(x[:, None], dtype=np.float32)),
            torch.from_numpy(labels.astype(np.int64)),
        )

    return (
        dataset(x_train, train_labels[train_idx]),
        dataset(scaled(train_images[val_idx]), train_labels[val_idx]),
        dataset(scaled(test_images), test_labels),
    )
