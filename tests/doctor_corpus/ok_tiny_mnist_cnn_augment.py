# A small MNIST-style CNN with a per-sample augmentation in __getitem__ (random shift
# and noise), batch 64, one epoch of 50 batches in the main process. The waits are a
# real share of each tiny step but a fraction of a second in all.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class ShiftedDigits(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.x = torch.rand(n, 1, 28, 28, generator=g) * 0.2
        self.x[torch.arange(n), 0, 2 * self.y + 3, 4:24] = 1.0

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        dx, dy = torch.randint(-2, 3, (2,)).tolist()
        img = torch.roll(self.x[i], shifts=(dy, dx), dims=(1, 2))
        img = (img + 0.05 * torch.randn_like(img)).clamp(0, 1)
        return (img - 0.1307) / 0.3081, self.y[i]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 5, stride=2)
        self.fc = nn.Linear(4 * 12 * 12, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.relu(self.conv1(x)), 1))


torch.manual_seed(0)
loader = DataLoader(ShiftedDigits(3200), batch_size=64, shuffle=True)
model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
for epoch in range(1):
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.3f}")
