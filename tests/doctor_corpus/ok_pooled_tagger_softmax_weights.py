# An attention-pooling tagger whose pooling weights are a softmax over the positions:
# they always sum to 1. Correct.
import torch
import torch.nn.functional as F
from torch import nn


class PooledTagger(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.score = nn.Linear(d, 1)
        self.out = nn.Linear(d, 1)

    def forward(self, x):
        h = torch.tanh(self.proj(x))
        w = torch.softmax(self.score(h), dim=1)
        pooled = (w * h).sum(dim=1)
        return torch.sigmoid(self.out(pooled)).squeeze(1)


torch.manual_seed(3)
model = PooledTagger()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
seqs = torch.randn(256, 3, 16)
tags = (seqs[:, :, 0].mean(1) > 0).float()
for i in range(0, 256, 32):
    probs = model(seqs[i:i + 32])
    loss = F.binary_cross_entropy(probs, tags[i:i + 32])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
