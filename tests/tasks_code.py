"""User code for the step-function tests: tasks other than (input, target) classification.

Written the way a user would write it, importable as ``tests.tasks_code:...`` from the
config (the repository root is on the path in tests).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, IterableDataset, TensorDataset

# ---- character-level language model: dict batches, padding, perplexity ----------------

VOCAB = 12  # 0 is padding


class Sequences(Dataset):
    """Variable-length sequences of a repeating pattern: predictable, so the loss falls."""

    def __init__(self, n: int = 96, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(n):
            length = int(torch.randint(5, 12, (1,), generator=g))
            start = int(torch.randint(1, VOCAB, (1,), generator=g))
            ids = (torch.arange(length) + start) % (VOCAB - 1) + 1
            self.items.append(ids)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        ids = self.items[i]
        return {"input_ids": ids[:-1], "labels": ids[1:], "id": f"seq-{i}"}


def make_lm_data(n: int = 96):
    return Sequences(n, seed=0), Sequences(32, seed=1)


def pad(samples: list[dict]) -> dict:
    longest = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), longest, dtype=torch.long)
    labels = torch.full((len(samples), longest), -100, dtype=torch.long)
    for row, s in enumerate(samples):
        ids[row, : len(s["input_ids"])] = s["input_ids"]
        labels[row, : len(s["labels"])] = s["labels"]
    return {"input_ids": ids, "labels": labels, "id": [s["id"] for s in samples]}


class CharLM(nn.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.rnn = nn.GRU(width, width, batch_first=True)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(ids))[0])


def make_lm(width: int = 32) -> nn.Module:
    return CharLM(width)


def lm_step(model: nn.Module, batch: dict) -> dict:
    assert isinstance(batch["id"], list)  # non-tensor leaves pass through
    logits = model(batch["input_ids"])
    labels = batch["labels"]
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    valid = labels != -100
    hits = ((logits.argmax(-1) == labels) & valid).sum()
    return {"loss": loss, "ppl": loss.detach().exp(), "token_acc": (hits, valid.sum())}


# ---- regression with MSE, MAE logged -----------------------------------------------------


def make_regression(n: int = 256):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 6, generator=g)
    y = x @ torch.linspace(-1, 1, 6)[:, None] + 0.05 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def make_regressor() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 1))


def regression_step(model: nn.Module, batch) -> dict:
    x, y = batch
    out = model(x)
    return {"loss": F.mse_loss(out, y), "mae": (out - y).abs().mean()}


# ---- two inputs ------------------------------------------------------------------------


class TwoTowers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 16)
        self.b = nn.Linear(3, 16)
        self.head = nn.Linear(16, 2)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.a(a) + self.b(b)))


def make_two_inputs(n: int = 256):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, 4, generator=g), torch.randn(n, 3, generator=g)
    y = ((a[:, 0] + b[:, 0]) > 0).long()
    samples = [((a[i], b[i]), y[i]) for i in range(n)]
    return samples[:192], samples[192:]


def two_input_step(model: nn.Module, batch) -> dict:
    (a, b), y = batch
    logits = model(a, b)
    return {"loss": F.cross_entropy(logits, y), "acc": (logits.argmax(1) == y).float().mean()}


# ---- a stream ----------------------------------------------------------------------------


class Stream(IterableDataset):
    """A finite stream whose order depends on the epoch (set_epoch), as a sharded reader's."""

    def __init__(self, n: int = 200) -> None:
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(100 + self.epoch)
        for i in torch.randperm(self.n, generator=g).tolist():
            x = torch.full((6,), float(i) / self.n) + 0.01 * i % 3
            yield x, x.sum(0, keepdim=True)


def make_stream():
    return Stream(), make_regression(64)


# ---- callbacks ---------------------------------------------------------------------------


class Recorder:
    """A callback that notes every event, and counts steps as its state."""

    def __init__(self, stop_at: int = 0) -> None:
        self.events: list[tuple] = []
        self.steps = 0
        self.stop_at = stop_at

    def on_fit_start(self, ctx) -> None:
        self.events.append(("fit_start", ctx.step))

    def on_step_end(self, ctx) -> None:
        self.steps += 1
        if self.stop_at and ctx.step >= self.stop_at:
            ctx.request_stop()

    def on_eval_end(self, ctx) -> None:
        self.events.append(("eval_end", ctx.step, sorted(ctx.metrics)))

    def on_checkpoint(self, ctx) -> None:
        self.events.append(("checkpoint", ctx.step, ctx.checkpoint))

    def on_fit_end(self, ctx) -> None:
        self.events.append(("fit_end", ctx.step, "test/loss" in ctx.metrics))
        if ctx.run_dir is not None:
            (ctx.run_dir / "recorder.txt").write_text(f"{self.steps} steps\n")

    def state_dict(self) -> dict:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.steps = state["steps"]
