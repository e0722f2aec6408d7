# Per-pixel standardization written as a numpy lambda passed to the Dataset: numpy's
# 0/0 on the constant border pixels gives NaN (with only a RuntimeWarning), and every
# sample reaches the model with NaN in it.
import warnings

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

warnings.filterwarnings("ignore", category=RuntimeWarning)


class NpyDigits(Dataset):
    def __init__(self, arrays, labels, transform):
        self.arrays, self.labels, self.transform = arrays, labels, transform

    def __len__(self):
        return len(self.arrays)

    def __getitem__(self, i):
        x = self.transform(self.arrays[i])
        return torch.from_numpy(x.astype(np.float32)).flatten(), int(self.labels[i])


rng = np.random.default_rng(1)
arrays = np.zeros((320, 8, 8))
arrays[:, 2:6, 2:6] = rng.random((320, 4, 4))
labels = rng.integers(0, 4, size=320)
mu, sigma = arrays.mean(axis=0), arrays.std(axis=0)
standardize = lambda a: (a - mu) / sigma  # noqa: E731  # expect: nonfinite-input

torch.manual_seed(0)
loader = DataLoader(NpyDigits(arrays, labels, standardize), batch_size=32, shuffle=True)
clf = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(clf.parameters(), lr=0.05)
for epoch in range(2):
    for x, y in loader:  # expect-related: nonfinite-input
        loss = nn.functional.cross_entropy(clf(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
