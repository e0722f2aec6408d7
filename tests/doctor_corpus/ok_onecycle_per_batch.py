# OneCycleLR is a per-batch schedule: it is stepped after every optimizer step.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Waves(Dataset):
    def __init__(self, n=600, length=24):
        g = torch.Generator().manual_seed(0)
        self.freq = torch.randint(1, 4, (n,), generator=g)
        t = torch.linspace(0, 1, length)
        noise = 0.2 * torch.randn(n, length, generator=g)
        self.x = torch.sin(6.28 * self.freq.unsqueeze(1) * t) + noise

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.freq[i] - 1


torch.manual_seed(0)
loader = DataLoader(Waves(), batch_size=50, shuffle=True)
model = nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Linear(64, 3))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
epochs = 3
scheduler = torch.optim.lr_scheduler.OneCycleLR(
    optimizer, max_lr=1e-2, epochs=epochs, steps_per_epoch=len(loader)
)
for epoch in range(epochs):
    for xb, yb in loader:
        loss = nn.functional.cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
