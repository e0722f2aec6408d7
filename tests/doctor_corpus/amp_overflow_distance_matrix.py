# Mixed-precision training of a model that places 12 points in 3-D so that their distance
# matrix matches a target one. The distance of each point to itself is sqrt(0): its
# gradient is NaN at every step, the GradScaler skips every step and halves its scale.
import torch
from torch import nn


class Placer(nn.Module):
    def __init__(self, d_in=24, n_points=12):
        super().__init__()
        self.n_points = n_points
        self.net = nn.Sequential(nn.Linear(d_in, 64), nn.GELU(), nn.Linear(64, n_points * 3))

    def forward(self, x):
        coords = self.net(x).view(-1, self.n_points, 3)
        diff = coords.unsqueeze(2) - coords.unsqueeze(1)
        return torch.sqrt((diff**2).sum(-1))


torch.manual_seed(0)
model = Placer()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cpu")
for step in range(80):
    x = torch.randn(16, 24)
    true_coords = x[:, :12].unsqueeze(-1) * torch.tensor([1.0, 0.5, 0.25])
    target = torch.cdist(true_coords, true_coords)
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        dist = model(x)
        loss = nn.functional.mse_loss(dist.float(), target)
    scaler.scale(loss).backward()
    scaler.step(optimizer)  # expect: amp-overflow
    scaler.update()
    if step % 20 == 0:
        print(f"step {step}: loss {loss.item():.4f} scale {scaler.get_scale():.3g}")
