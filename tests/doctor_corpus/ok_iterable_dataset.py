# (review script) written to the doctor's spec; expected: none
# A streaming IterableDataset (records generated on the fly, as from a log reader),
# batched by the DataLoader; a step-based loop with a fixed budget and a periodic eval.
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset


class SensorStream(IterableDataset):
    def __init__(self, n, seed):
        self.n, self.seed = n, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.n):
            t = torch.rand((), generator=g) * 10
            feats = torch.stack([torch.sin(t), torch.cos(t), t / 10]) + 0.05 * torch.randn(3, generator=g)
            label = int(math.sin(float(t)) > 0.3)
            yield feats, label


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 32), nn.Tanh(), nn.Linear(32, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
train_loader = DataLoader(SensorStream(6400, 1), batch_size=32)
val_loader = DataLoader(SensorStream(512, 2), batch_size=128)
for step, (xb, yb) in enumerate(train_loader):
    loss = nn.functional.cross_entropy(model(xb), yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        model.eval()
        with torch.no_grad():
            correct = sum((model(xv).argmax(1) == yv).sum().item() for xv, yv in val_loader)
        model.train()
        print(f"step {step} loss {loss.item():.4f} val acc {correct / 512:.3f}")
