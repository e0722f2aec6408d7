# The same regressor with lr=1e-2: over 200 steps the loss falls steadily.
import torch
from torch import nn


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


torch.manual_seed(0)
x = torch.randn(2000, 8)
y = torch.sin(x[:, 0]) + x[:, 1] * x[:, 2]
model = Regressor()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(200):
    idx = torch.randint(0, 2000, (64,))
    loss = nn.functional.mse_loss(model(x[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        print(f"step {step}: mse {loss.item():.4f}")
