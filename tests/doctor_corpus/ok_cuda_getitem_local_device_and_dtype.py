# __getitem__ that uses .to() only for dtypes and to match a local tensor's own device
# (x.device, the CPU here and in workers): nothing goes to the GPU.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class MaskedSeries(Dataset):
    def __init__(self, n=400, length=24):
        g = torch.Generator().manual_seed(0)
        self.values = torch.randn(n, length, generator=g).to(torch.float16)
        self.lengths = torch.randint(8, length + 1, (n,), generator=g)

    def __len__(self):
        return len(self.values)

    def __getitem__(self, idx):
        x = self.values[idx].to(torch.float32)
        mask = (torch.arange(x.shape[0]) < self.lengths[idx]).to(x.device)
        x = x * mask.to(dtype=x.dtype)
        return x, x[: int(self.lengths[idx])].mean().unsqueeze(0)


torch.manual_seed(0)
loader = DataLoader(MaskedSeries(), batch_size=40, shuffle=True)
model = nn.Sequential(nn.Linear(24, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(3):
    for x, target in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: mse {loss.item():.4f}")
