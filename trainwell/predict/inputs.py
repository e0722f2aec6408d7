"""An INPUT array for predict, checked against what the model takes before it runs.

The model's inputs (name, dtype, shape with free axes) are recorded in every artifact by
``trainwell export``, so a wrong array is one line naming both shapes, not a runtime's
stack trace.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from trainwell.errors import UserError


def read_array(source: str | Path | np.ndarray) -> tuple[np.ndarray, str]:
    """The array of a ``.npy`` file (or the array given), and how to name it in messages.

    Example:
        >>> arr, name = read_array(np.zeros((2, 3)))
        >>> arr.shape, name
        ((2, 3), 'the array given')
    """
    if isinstance(source, np.ndarray):
        return source, "the array given"
    path = Path(source)
    name = f"INPUT {path}"
    if not path.is_file():
        raise UserError(f"{name} does not exist")
    with path.open("rb") as f:
        magic = f.read(6)
    if not (magic == b"\x93NUMPY" or magic.startswith(b"PK")):  # .npy, or an .npz (a zip)
        raise UserError(f"{name} is not a NumPy .npy file (save the array with np.save)")
    try:
        # allow_pickle=False: an object array in a .npy would run code on load.
        found = np.load(path, allow_pickle=False)
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise UserError(f"{name} holds Python objects, not numbers; refusing to unpickle "
                            "it (it could run code)") from None  # fmt: skip
        raise UserError(f"{name} is not a readable .npy array ({_first(exc)})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise UserError(f"{name} is not a readable .npy array ({_first(exc)})") from None
    if not isinstance(found, np.ndarray):  # an .npz archive
        found.close()
        raise UserError(f"{name} is an .npz archive; give one array saved with np.save")
    return found, name


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def fit_to(arr: np.ndarray, spec: dict[str, Any], name: str) -> np.ndarray:
    """``arr`` as the model's input ``spec`` takes it: a batch axis added to one sample, a
    wider float or int cast to the input's dtype; anything else refused in one line.

    Example:
        >>> spec = {"name": "input", "dtype": "float32", "shape": [None, 1, 8, 8]}
        >>> fit_to(np.zeros((1, 8, 8)), spec, "x").shape
        (1, 1, 8, 8)
        >>> fit_to(np.zeros((3, 8, 8)), spec, "x")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: x has shape (3, 8, 8); the model takes input of shape ...
    """
    shape = spec["shape"]
    if arr.ndim == len(shape) - 1 and _fits(arr.shape, shape[1:]):
        arr = arr[None]  # one sample
    if arr.ndim != len(shape) or not _fits(arr.shape, shape):
        sample = _shape_text(shape[1:], batch=False)
        raise UserError(
            f"{name} has shape {tuple(arr.shape)}; the model takes {spec['name']} of shape "
            f"{_shape_text(shape)} (one sample {sample} or a batch of them)"
        )
    if arr.shape[0] == 0:
        raise UserError(f"{name} holds no samples (its first axis has length 0)")
    want = np.dtype(spec["dtype"])
    if _kind(arr.dtype) != _kind(want):
        raise UserError(
            f"{name} holds {arr.dtype} values; the model takes {spec['name']} as {want} "
            f"({'token or class ids' if _kind(want) == 'int' else 'real numbers'})"
        )
    return np.ascontiguousarray(arr.astype(want, copy=False))


def _fits(actual: tuple[int, ...], wanted: list[int | None]) -> bool:
    return all(w is None or a == w for a, w in zip(actual, wanted))


def _shape_text(shape: list[int | None], batch: bool = True) -> str:
    dims = ["?" if d is None else str(d) for d in shape]
    if batch and dims:
        dims[0] = "N" if shape[0] is None else dims[0]
    if len(dims) == 1:
        return f"({dims[0]},)"
    return f"({', '.join(dims)})"


def _kind(dtype: np.dtype) -> str:
    # Same kind casts without surprise (float64 -> float32, int32 -> int64); across kinds
    # (floats into an embedding's ids, text, booleans) the input is wrong, not the dtype.
    if dtype.kind == "f":
        return "float"
    if dtype.kind in "iu":
        return "int"
    return dtype.kind
