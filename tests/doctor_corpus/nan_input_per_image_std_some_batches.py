# Per-image standardization in __getitem__ ((x - x.mean()) / x.std()): the few blank
# scans in the data (every pixel equal) have std 0 and give NaN; only the batches that
# hold one of them are bad.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Scans(Dataset):
    def __init__(self, n=480):
        g = torch.Generator().manual_seed(0)
        self.scans = torch.rand(n, 16, 16, generator=g)
        self.scans[[200, 201, 350]] = 0.5  # blank scans
        self.labels = torch.randint(0, 3, (n,), generator=g)

    def __len__(self):
        return len(self.scans)

    def __getitem__(self, i):
        scan = self.scans[i]
        scan = (scan - scan.mean()) / scan.std()  # expect: nonfinite-input
        return scan.unsqueeze(0), self.labels[i]


torch.manual_seed(0)
loader = DataLoader(Scans(), batch_size=40, shuffle=False)
model = nn.Sequential(nn.Conv2d(1, 4, 3, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 7 * 7, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for scans, labels in loader:  # expect-related: nonfinite-input
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(scans), labels)
        loss.backward()
        optimizer.step()
