# (review script) written to the doctor's spec; expected: nonfinite-loss@28
# Heteroscedastic regression (predicts a mean and a variance) with LayerDrop decided by
# random.random() as in older fairseq/HF code. The variance head is a plain Linear and
# the Gaussian NLL takes torch.log(var): a negative variance gives NaN. Steps with a
# non-finite loss are skipped; training goes on and prints its numbers.
import random

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, layerdrop=0.3):
        super().__init__()
        self.inp = nn.Linear(4, 32)
        self.layers = nn.ModuleList([nn.Linear(32, 32) for _ in range(4)])
        self.drop = nn.Dropout(0.1)
        self.mean, self.var = nn.Linear(32, 1), nn.Linear(32, 1)
        self.layerdrop = layerdrop

    def forward(self, x):
        h = torch.relu(self.inp(x))
        for layer in self.layers:
            if self.training and random.random() < self.layerdrop:
                continue
            h = h + torch.relu(layer(self.drop(h)))
        var = self.var(h).squeeze(1) + 1.0
        return self.mean(h).squeeze(1), torch.log(var)  # expect: nonfinite-loss


random.seed(0)
torch.manual_seed(0)
x = torch.randn(960, 4)
y = x[:, 0] * 2 + torch.randn(960) * (0.5 + x[:, 1].abs())
model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
skipped = 0
for epoch in range(3):
    for i in range(0, 960, 32):
        mu, log_var = model(x[i : i + 32])
        loss = (0.5 * (log_var + (y[i : i + 32] - mu) ** 2 / log_var.exp())).mean()
        optimizer.zero_grad()
        loss.backward()
        if not torch.isfinite(loss):
            skipped += 1
            continue
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f} skipped {skipped} next random {random.random():.6f}")
print("torch rng", torch.rand(1).item())
