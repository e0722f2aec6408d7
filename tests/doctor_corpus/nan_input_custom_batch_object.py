# (review script) written to the doctor's spec; expected: nonfinite-input@43
# A collate_fn that returns a small Batch object with a .to(device) method (the
# torchtext / PyG style). One sample in the last part of the data has a NaN feature.
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


@dataclass
class Batch:
    x: torch.Tensor
    y: torch.Tensor

    def to(self, device):
        return Batch(self.x.to(device), self.y.to(device))


class Points(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(800, 6, generator=g)
        self.x[700, 2] = float("nan")
        self.y = (self.x[:, 0] > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def collate(samples):
    xs, ys = zip(*samples)
    return Batch(torch.stack(xs), torch.stack(ys))


torch.manual_seed(0)
loader = DataLoader(Points(), batch_size=50, collate_fn=collate)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in loader:  # expect: nonfinite-input
    batch = batch.to("cpu")
    loss = nn.functional.cross_entropy(model(batch.x), batch.y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("loss", loss.item())
