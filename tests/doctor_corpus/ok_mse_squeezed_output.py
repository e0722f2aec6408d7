import torch
from torch import nn

torch.manual_seed(0)
X = torch.randn(256, 5)
y = X @ torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0])
reg = nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(reg.parameters(), lr=1e-2)
for epoch in range(5):
    for i in range(0, 256, 32):
        pred = reg(X[i : i + 32])
        loss = nn.functional.mse_loss(pred.squeeze(-1), y[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
