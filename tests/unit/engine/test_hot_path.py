"""Hot-path hygiene of the training step, checked on what the loop really does: no host
sync per step, gradients set to None, non_blocking copies from pinned memory, cuDNN's
autotuner off determinism, channels_last for CNNs."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import trainwell
from trainwell.engine.loading.batch import to_device
from trainwell.engine.loading.loaders import LoaderSettings, eval_loader
from trainwell.engine.loading.seeding import set_deterministic

LEAN = ["train.precision=fp32", "doctor.enabled=false", "run.device=cpu", "sched.name=constant",
        "train.grad_clip=0", "data.batch_size=16", "train.epochs=1"]  # fmt: skip


def _data(n: int = 320) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g))


def _count_reads(monkeypatch, steps: int, tmp_path) -> int:
    """Reads of a tensor's value into Python (a device sync on a GPU) made by trainwell's
    own code during a run of ``steps`` steps with one log point."""
    calls = {"n": 0}
    for name in ("item", "tolist", "__float__", "__bool__", "__int__"):
        real = getattr(torch.Tensor, name)

        def counting(self, *args, _real=real):
            # AdamW reads its CPU step counters: not a device sync, and not trainwell's.
            if "/trainwell/" in sys._getframe(1).f_code.co_filename:
                calls["n"] += 1
            return _real(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counting)
    cfg = trainwell.load_config(overrides=[*LEAN, f"train.max_steps={steps}",
                                           "train.log_every=1000",
                                           f"run.dir={tmp_path / str(steps)}"])  # fmt: skip
    try:
        trainwell.fit(cfg, model=nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)),
                      train_data=_data(), loss_fn=nn.CrossEntropyLoss())  # fmt: skip
    finally:
        monkeypatch.undo()
    return calls["n"]


@pytest.mark.slow
def test_no_host_sync_per_step(monkeypatch, tmp_path):
    # 5 steps or 15 between two log points: the same reads, so none of them is per step.
    few, many = _count_reads(monkeypatch, 5, tmp_path), _count_reads(monkeypatch, 15, tmp_path)
    assert few == many


@pytest.mark.slow
def test_gradients_are_none_at_every_step_start(tmp_path):
    seen = []

    def step(model, batch):
        seen.append(all(p.grad is None for p in model.parameters()))
        return nn.functional.cross_entropy(model(batch[0]), batch[1])

    cfg = trainwell.load_config(overrides=[*LEAN, "train.max_steps=6",
                                           "train.grad_accum_steps=2",
                                           f"run.dir={tmp_path / 'run'}"])  # fmt: skip
    trainwell.fit(cfg, model=nn.Linear(8, 3), train_data=_data(), step_fn=step)
    # zero_grad(set_to_none=True): freed, not zero-filled, before the first micro-batch;
    # the second micro-batch of each step accumulates into them.
    steps = seen[-12:]  # after the engine's own check of the step on one batch
    assert steps[0::2] == [True] * 6 and not any(steps[1::2])


def test_copies_are_non_blocking_from_pinned_memory(monkeypatch):
    calls = []
    real_to = torch.Tensor.to

    def recording_to(self, *args, **kwargs):
        calls.append(kwargs.get("non_blocking"))
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    to_device({"x": torch.ones(2), "y": [torch.zeros(1)]}, torch.device("cpu"))
    monkeypatch.undo()
    assert calls == [True, True]
    # The loaders pin host memory for CUDA (and only there: pinning for the CPU is waste).
    from trainwell.engine.distributed.placement import Placement

    settings = LoaderSettings(batch_size=4, num_workers=0, pin_memory=True)
    cpu = eval_loader(_data(8), settings, Placement(torch.device("cpu")))
    cuda = eval_loader(_data(8), settings, Placement(torch.device("cuda", 0)))
    assert cpu.pin_memory is False and cuda.pin_memory is True


def test_cudnn_autotuner_follows_determinism():
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
    try:
        set_deterministic(False)
        assert torch.backends.cudnn.benchmark is True
        set_deterministic(True)
        assert torch.backends.cudnn.benchmark is False
    finally:
        set_deterministic(before[0])
        torch.backends.cudnn.benchmark = before[1]


@pytest.mark.slow
def test_channels_last_trains_a_cnn_in_that_format(tmp_path):
    formats = []

    def step(model, batch):
        formats.append(batch[0].is_contiguous(memory_format=torch.channels_last))
        return nn.functional.cross_entropy(model(batch[0]), batch[1])

    g = torch.Generator().manual_seed(0)
    images = TensorDataset(torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 2, (64,)))

    def run(flag: str):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(288, 2))
        cfg = trainwell.load_config(overrides=[*LEAN, "train.max_steps=3", flag,
                                               f"run.dir={tmp_path / flag}"])  # fmt: skip
        return trainwell.fit(cfg, model=model, train_data=images, step_fn=step).model

    plain = run("model.channels_last=false")
    assert formats[-3:] == [False] * 3  # the 3 steps (after the engine's one-batch check)
    fast = run("model.channels_last=true")
    assert formats[-3:] == [True] * 3
    assert fast[0].weight.is_contiguous(memory_format=torch.channels_last)
    # The same training, up to the order of float sums in the convolution.
    for a, b in zip(plain.parameters(), fast.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
