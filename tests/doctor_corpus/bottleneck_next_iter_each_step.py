# A step-based loop that takes each batch with next(iter(loader)): every step builds a
# new iterator, and the per-sample loading (~5 ms an image) dominates the step: the
# fix starts at that line (one iterator, next(it) each step).
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):  # expect-related: data-bottleneck
        time.sleep(0.005)  # image decode
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, 16, 16, generator=g), i % 4


torch.manual_seed(0)
loader = DataLoader(SlowImages(), batch_size=8, shuffle=True)
model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(45):
    images, target = next(iter(loader))  # expect: data-bottleneck
    loss = nn.functional.cross_entropy(model(images), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("loss", loss.item())
