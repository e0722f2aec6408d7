# Every sample is "decoded" and augmented on the fly in __getitem__ (the sleep stands
# for reading and decoding a file), in the main process: the tiny model waits on the
# data for most of each step.
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SpectrogramFiles(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):  # expect-related: data-bottleneck
        g = torch.Generator().manual_seed(i)
        time.sleep(0.004)  # open, decode, resample...
        label = i % 3
        spec = torch.randn(32, generator=g) + label
        spec = spec * (0.9 + 0.2 * torch.rand(1, generator=g))  # random gain augmentation
        return spec, label


torch.manual_seed(0)
loader = DataLoader(SpectrogramFiles(576), batch_size=16, shuffle=True, num_workers=0)  # expect: data-bottleneck
model = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step, (spec, label) in enumerate(loader):
    loss = nn.functional.cross_entropy(model(spec), label)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 14 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
