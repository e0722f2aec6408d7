"""The training loop's stack room (``trainwell/engine/loop/stack_room.py``): a hot call that
crosses a frame-stack chunk's end maps and unmaps a chunk every time (counted as the page
faults of the fresh chunks), at some call depths; under ``call_with_room`` at none. And
``fit`` runs its loop that way."""

from __future__ import annotations

import resource
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import trainwell
from trainwell.engine.loop import stack_room
from trainwell.engine.loop.stack_room import call_with_room

CPYTHON_CHUNKS = sys.implementation.name == "cpython" and sys.version_info >= (3, 11)
CALLS = 1000


def _leaf(a: int) -> int:
    return a + 1


# A frame wider than one step of _nest's recursion, so that some depth leaves too little
# room for it: the chunk's end is then crossed on every call.
_leaf.__code__ = _leaf.__code__.replace(co_stacksize=_leaf.__code__.co_stacksize + 64)


def _hot() -> None:
    for i in range(CALLS):
        _leaf(i)


def _nest(depth: int, fn, *args) -> None:
    if depth == 0:
        fn(*args)
        return
    _nest(depth - 1, fn, *args)


def _faults(depth: int, *call) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    _nest(depth, *call)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(not CPYTHON_CHUNKS, reason="CPython 3.11+ keeps frames in chunks")
def test_no_chunk_is_mapped_per_call_under_the_room():
    # 400 depths span more than a 16 KiB chunk: the plain call meets its end at some.
    plain = [_faults(depth, _hot) for depth in range(400)]
    room = [_faults(depth, call_with_room, _hot) for depth in range(400)]
    assert max(plain) >= CALLS, "no depth crossed a chunk's end: the test shows nothing"
    assert max(room) < CALLS // 10, f"a chunk per call under the room ({max(room)} faults)"


def test_the_call_is_the_function_s():
    assert call_with_room(divmod, 7, 2) == (3, 1)
    assert call_with_room(sorted, [2, 1], key=None, reverse=True) == [2, 1]
    with pytest.raises(ZeroDivisionError):
        call_with_room(divmod, 1, 0)


@pytest.mark.skipif(not CPYTHON_CHUNKS, reason="CPython 3.11+ keeps frames in chunks")
def test_the_room_frame_is_too_large_for_a_plain_chunk():
    code = stack_room._room.__code__
    assert stack_room.WIDE and code.co_stacksize > 16 * 1024 // 8  # a 16 KiB chunk's slots


def test_fit_runs_the_loop_in_the_room(tmp_path):
    rooms = []

    class SeeStack:
        def on_step_end(self, ctx) -> None:
            frame = sys._getframe()
            while frame is not None:
                rooms.append(frame.f_code is stack_room._room.__code__)
                frame = frame.f_back

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 4, generator=g), torch.randint(0, 2, (32,), generator=g))
    cfg = trainwell.load_config(overrides=[
        f"run.dir={tmp_path / 'run'}", "run.device=cpu", "doctor.enabled=false",
        "data.batch_size=16", "train.epochs=1", "train.precision=fp32",
    ])  # fmt: skip
    trainwell.fit(cfg, model=nn.Linear(4, 2), train_data=data, loss_fn=nn.CrossEntropyLoss(),
                  callbacks=[SeeStack()])  # fmt: skip
    assert rooms.count(True) == 2  # one room frame under each of the two steps
