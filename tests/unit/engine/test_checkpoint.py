"""Tests for trainwell.engine.checkpointing.checkpoint: atomic saves, safe loads, rotation,
config."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch

from trainwell.engine.checkpointing import checkpoint as ckpt
from trainwell.engine.checkpointing.checkpoint import (
    CheckpointConfig,
    load_checkpoint,
    rotate,
    save_atomic,
    save_copies,
)
from trainwell.errors import UserError


def nested_state() -> dict:
    """Everything a real checkpoint holds: tensors, nested dicts/lists/tuples, scalars, None."""
    g = torch.Generator().manual_seed(0)
    return {
        "model": {
            "0.weight": torch.randn(4, 3, generator=g),
            "0.bias": torch.randn(4, generator=g),
            "bn.num_batches_tracked": torch.tensor(17, dtype=torch.int64),
            "half": torch.randn(2, 2, generator=g).to(torch.bfloat16),
        },
        "optimizer": {
            "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(4, 3, generator=g)}},
            "param_groups": [
                {"lr": 0.001, "betas": (0.9, 0.999), "params": [0, 1], "nesterov": False}
            ],
        },
        "step": 123,
        "epoch": 4,
        "best": float("inf"),
        "config": {"run": {"name": None, "seed": 7}, "tags": ["a", "b"], "shape": (1, 8, 8)},
        "rng": [torch.ByteTensor([1, 2, 3]), None, 2.5],
    }


def assert_same(a, b, where: str = "state") -> None:
    """Recursive equality that also checks container types and tensor dtypes."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


# --- save_atomic -----------------------------------------------------------------------


def test_round_trip_nested_state_loads_with_weights_only(tmp_path: Path) -> None:
    state = nested_state()
    path = tmp_path / "last.pt"
    save_atomic(state, path)
    loaded = torch.load(path, weights_only=True)
    assert_same(state, loaded)
    assert_same(state, load_checkpoint(path))


def test_save_accepts_str_path_and_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    save_atomic({"model": {}, "step": 1}, str(path))
    save_atomic({"model": {}, "step": 2}, str(path))
    assert load_checkpoint(path)["step"] == 2


def test_save_leaves_no_temp_files(tmp_path: Path) -> None:
    save_atomic(nested_state(), tmp_path / "last.pt")
    save_atomic(nested_state(), tmp_path / "best.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]


def _failing_save(obj, f, *args, **kwargs) -> None:
    f.write(b"PK\x03\x04 half a checkpoint")
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_keeps_previous_file_and_names_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "last.pt"
    save_atomic({"model": {"w": torch.arange(10.0)}, "step": 1}, path)
    before = path.read_bytes()

    monkeypatch.setattr(ckpt.torch, "save", _failing_save)
    with pytest.raises(OSError) as info:
        save_atomic({"model": {"w": torch.zeros(10)}, "step": 2}, path)
    monkeypatch.undo()

    assert info.value.errno == errno.ENOSPC
    assert str(path) in str(info.value)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
    assert load_checkpoint(path)["step"] == 1


def test_disk_full_on_first_save_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ckpt.torch, "save", _failing_save)
    with pytest.raises(OSError, match="last.pt"):
        save_atomic({"model": {}}, tmp_path / "last.pt")
    assert list(tmp_path.iterdir()) == []


def test_save_copies_serializes_once_and_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = nested_state()
    calls = []
    real = ckpt.torch.save
    monkeypatch.setattr(ckpt.torch, "save", lambda *a, **k: (calls.append(1), real(*a, **k)))
    best, last = tmp_path / "best.pt", tmp_path / "last.pt"
    save_copies(state, [best, last])
    assert len(calls) == 1
    assert best.read_bytes() == last.read_bytes()
    assert_same(state, load_checkpoint(last))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]


def test_save_copies_fsyncs_the_folder_once_after_every_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []
    monkeypatch.setattr(ckpt, "fsync_dir", lambda d: seen.append(sorted(os.listdir(d))))
    save_copies({"model": {}, "step": 1}, [tmp_path / "best.pt", tmp_path / "last.pt"])
    assert seen == [["best.pt", "last.pt"]]
    save_copies({"model": {}, "step": 2}, [tmp_path / "last.pt"])
    assert len(seen) == 2


def test_save_copies_full_disk_on_the_copy_keeps_its_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    best, last = tmp_path / "best.pt", tmp_path / "last.pt"
    save_atomic({"model": {}, "step": 1}, last)
    before = last.read_bytes()

    def half_copy(src, out, length) -> None:
        out.write(src.read(8))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.shutil, "copyfileobj", half_copy)
    with pytest.raises(OSError) as info:
        save_copies({"model": {}, "step": 2}, [best, last])
    assert info.value.errno == errno.ENOSPC and str(last) in str(info.value)
    assert last.read_bytes() == before  # the old last.pt, whole
    assert load_checkpoint(best)["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]


def test_saved_file_mode_follows_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        save_atomic({"model": {}}, tmp_path / "last.pt")
    finally:
        os.umask(old)
    assert (tmp_path / "last.pt").stat().st_mode & 0o777 == 0o644


# --- load_checkpoint -------------------------------------------------------------------


def test_load_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.pt"
    with pytest.raises(UserError, match="does not exist") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


def test_load_zero_byte_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    with pytest.raises(UserError, match="empty") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


def test_load_truncated_file(tmp_path: Path) -> None:
    good = tmp_path / "good.pt"
    save_atomic(nested_state(), good)
    data = good.read_bytes()
    path = tmp_path / "truncated.pt"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="truncated or not a checkpoint") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "data",
    [
        b"\x00garbage bytes" * 20,
        b"PK\x03\x04garbage",
        b"\x80\x02}q\x00.",
        b"this is not a checkpoint\n",  # torch raised IndexError here
        b"h\x05.",  # and KeyError here
    ],
    ids=["binary", "fake-zip", "legacy-pickle", "text", "bad-memo"],
)
def test_load_garbage_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "garbage.pt"
    path.write_bytes(data)
    with pytest.raises(UserError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_load_garbage_is_not_called_pickled_code(tmp_path: Path) -> None:
    path = tmp_path / "garbage.pt"
    path.write_bytes(b"\x00garbage bytes" * 20)
    with pytest.raises(UserError) as info:
        load_checkpoint(path)
    assert "pickled" not in str(info.value)
    assert "corrupt" in str(info.value) or "not a checkpoint" in str(info.value)


@pytest.mark.parametrize("state", [{"step": 3, "optimizer": {}}, torch.zeros(3), [1, 2]])
def test_load_without_model_key(tmp_path: Path, state) -> None:
    path = tmp_path / "other.pt"
    torch.save(state, path)
    with pytest.raises(UserError, match="no 'model'") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


class _TouchWithOpen:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


class _TouchWithSystem:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


@pytest.mark.parametrize("payload", [_TouchWithOpen, _TouchWithSystem])
def test_load_refuses_pickled_code_without_running_it(tmp_path: Path, payload) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"model": payload(marker), "step": 1}, path)
    assert not marker.exists()

    with pytest.raises(UserError, match="pickled Python objects") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)
    assert not marker.exists()

    # The payload is live: an unsafe load would have run it.
    torch.load(path, weights_only=False)
    assert marker.exists()


# --- rotate ----------------------------------------------------------------------------


def _touch(folder: Path, *names: str) -> None:
    for name in names:
        (folder / name).write_bytes(b"x")


def test_rotate_keeps_newest_by_step_number(tmp_path: Path) -> None:
    _touch(tmp_path, "step-1.pt", "step-2.pt", "step-9.pt", "step-10.pt", "step-100.pt")
    _touch(tmp_path, "last.pt", "best.pt", "notes.txt", "step-x.pt", ".step-3.pt.abc.tmp")
    rotate(tmp_path, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            "step-10.pt",
            "step-100.pt",
            "last.pt",
            "best.pt",
            "notes.txt",
            "step-x.pt",
            ".step-3.pt.abc.tmp",
        ]
    )


def test_rotate_keep_one_and_keep_more_than_present(tmp_path: Path) -> None:
    _touch(tmp_path, "step-9.pt", "step-10.pt", "last.pt", "best.pt")
    rotate(tmp_path, keep_last=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "best.pt",
        "last.pt",
        "step-10.pt",
        "step-9.pt",
    ]
    rotate(tmp_path, keep_last=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt", "step-10.pt"]


def test_rotate_never_deletes_last_and_best_with_no_step_files(tmp_path: Path) -> None:
    _touch(tmp_path, "last.pt", "best.pt")
    rotate(tmp_path, keep_last=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]


# --- CheckpointConfig ------------------------------------------------------------------


def test_checkpoint_config_defaults_and_valid_edges() -> None:
    assert CheckpointConfig().every_steps == 0
    assert CheckpointConfig().keep_last == 3
    cfg = CheckpointConfig(every_steps=0, keep_last=1)
    assert (cfg.every_steps, cfg.keep_last) == (0, 1)


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"every_steps": -1}, "checkpoint.every_steps"),
        ({"keep_last": 0}, "checkpoint.keep_last"),
        ({"keep_last": -3}, "checkpoint.keep_last"),
    ],
)
def test_checkpoint_config_rejects(kwargs: dict, key: str) -> None:
    with pytest.raises(UserError) as info:
        CheckpointConfig(**kwargs)
    assert str(info.value).startswith(f"{key}:")
