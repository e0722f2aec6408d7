"""Character-level language model: dict batches of variable length, padded by a collate.

    cd examples/tasks && trainwell train --config char_lm.yaml
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

CHARS = " .abcdefghijklmnopqrstuvwxyz"
PAD = 0  # input id of padding; characters are 1..len(CHARS)
VOCAB = len(CHARS) + 1
WORDS = ["the", "cat", "dog", "sat", "on", "a", "mat", "ran", "to", "big", "red", "log"]


class Sentences(Dataset):
    """Random sentences of a small vocabulary; each sample predicts its next character."""

    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.texts = []
        for _ in range(n):
            k = int(torch.randint(3, 9, (1,), generator=g))  # 3..8 words: variable length
            idx = torch.randint(len(WORDS), (k,), generator=g).tolist()
            self.texts.append(" ".join(WORDS[i] for i in idx) + ".")

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        ids = torch.tensor([CHARS.index(c) + 1 for c in self.texts[i]])
        return {"input_ids": ids[:-1], "labels": ids[1:]}


def make_data(n_train: int = 1024, n_val: int = 256):
    return Sentences(n_train, seed=0), Sentences(n_val, seed=1)


def pad_collate(samples):
    """Pads input_ids with PAD and labels with -100 (ignored by the loss)."""
    longest = max(len(s["input_ids"]) for s in samples)
    ids = torch.full((len(samples), longest), PAD)
    labels = torch.full((len(samples), longest), -100)
    for row, s in enumerate(samples):
        ids[row, : len(s["input_ids"])] = s["input_ids"]
        labels[row, : len(s["labels"])] = s["labels"]
    return {"input_ids": ids, "labels": labels}


class CharLM(nn.Module):
    """Embeddings, then causal convolutions: position t sees characters t-6..t only."""

    def __init__(self, vocab: int = VOCAB, dim: int = 32, hidden: int = 96, kernel: int = 4):
        super().__init__()
        self.pad = kernel - 1
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.conv1 = nn.Conv1d(dim, hidden, kernel)
        self.conv2 = nn.Conv1d(hidden, hidden, kernel)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, input_ids):  # (N, L) -> (N, L, vocab)
        h = self.embed(input_ids).transpose(1, 2)  # (N, dim, L)
        h = F.relu(self.conv1(F.pad(h, (self.pad, 0))))  # left padding only: causal
        h = F.relu(self.conv2(F.pad(h, (self.pad, 0))))
        return self.head(h.transpose(1, 2))


def step(model, batch):
    logits = model(batch["input_ids"])
    labels = batch["labels"]
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    # Weight the epoch's averages by real tokens, not by sequences.
    return {"loss": loss, "ppl": loss.detach().exp(), "batch_size": (labels != -100).sum()}
