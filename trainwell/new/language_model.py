"""The language-model template: a character-level causal model on text it makes, with a
step function (dict batches, perplexity logged)."""

from __future__ import annotations

PREDICT_NOTE = "next-character accuracy"

CONFIG = """\
# trainwell train --config configs/default.yaml   (overrides: KEY=VALUE, e.g. optim.lr=1e-3)
data:
  name: "src.${pkg}.data:make_data"
  batch_size: 32
model:
  name: "src.${pkg}.model:CharLM"
  kwargs: {dim: 32, hidden: 64}
train:
  step: "src.${pkg}.step:step"
  epochs: 3
optim:
  lr: 1.0e-2
"""

DATA = '''\
"""Windows of characters from sentences of a tiny vocabulary, made on the fly; each
sample predicts the next character at every position.

Replace `Sentences` with your own text; keep `make_data` returning (train, val, test).
"""

import torch
from torch.utils.data import Dataset

CHARS = " .abcdefghijklmnopqrstuvwxyz"
VOCAB = len(CHARS)
WORDS = ["the", "cat", "dog", "sat", "on", "a", "mat", "ran", "to", "big", "red", "log"]
WINDOW = 32


def encode(text: str) -> torch.Tensor:
    return torch.tensor([CHARS.index(c) for c in text])


class Sentences(Dataset):
    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        words = torch.randint(len(WORDS), (n * WINDOW // 3,), generator=g).tolist()
        text = " ".join(WORDS[i] for i in words).replace(" the ", ". the ")
        self.ids = encode(text)[: n * WINDOW + 1]
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        chunk = self.ids[i * WINDOW : (i + 1) * WINDOW + 1]
        return {"input_ids": chunk[:-1], "labels": chunk[1:]}


def make_data(n_train: int = 512, n_val: int = 64, n_test: int = 64):
    return Sentences(n_train, seed=1), Sentences(n_val, seed=2), Sentences(n_test, seed=3)
'''

MODEL = '''\
"""The model: embeddings, then causal convolutions (position t sees characters <= t)."""

import torch.nn.functional as F
from torch import nn

from .data import VOCAB


class CharLM(nn.Module):
    def __init__(self, vocab: int = VOCAB, dim: int = 32, hidden: int = 64, kernel: int = 4):
        super().__init__()
        self.pad = kernel - 1
        self.embed = nn.Embedding(vocab, dim)
        self.conv1 = nn.Conv1d(dim, hidden, kernel)
        self.conv2 = nn.Conv1d(hidden, hidden, kernel)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, input_ids):  # (N, L) -> (N, L, vocab) logits
        h = self.embed(input_ids).transpose(1, 2)
        h = F.relu(self.conv1(F.pad(h, (self.pad, 0))))  # left padding only: causal
        h = F.relu(self.conv2(F.pad(h, (self.pad, 0))))
        return self.head(h.transpose(1, 2))
'''

STEP = '''\
"""The step: the forward and the loss of one batch; trainwell does the rest (precision,
accumulation, clipping, optimizer and schedule). Other returned values become metrics."""

import torch.nn.functional as F


def step(model, batch):
    logits = model(batch["input_ids"])
    loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
    return {"loss": loss, "ppl": loss.detach().exp()}
'''

TEST_MODEL = '''\
"""The model's own checks: shapes, causality, and that it can learn (overfit one batch)."""

import torch
from torch.utils.data import DataLoader

from src.${pkg}.data import VOCAB, make_data
from src.${pkg}.model import CharLM
from src.${pkg}.step import step


def first_batch(size=8):
    train, _, _ = make_data(n_train=size, n_val=1, n_test=1)
    return next(iter(DataLoader(train, batch_size=size)))


def test_one_batch_goes_through():
    batch = first_batch()
    out = CharLM()(batch["input_ids"])
    assert out.shape == (*batch["input_ids"].shape, VOCAB)
    assert torch.isfinite(step(CharLM(), batch)["loss"])


def test_a_position_never_sees_the_future():
    model = CharLM().eval()
    ids = first_batch(1)["input_ids"]
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % VOCAB
    assert torch.allclose(model(ids)[0, :-1], model(changed)[0, :-1])


def test_overfits_one_batch():
    torch.manual_seed(0)
    batch = first_batch()
    model = CharLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        opt.zero_grad()
        loss = step(model, batch)["loss"]
        loss.backward()
        opt.step()
    assert loss.item() < 0.3
'''
