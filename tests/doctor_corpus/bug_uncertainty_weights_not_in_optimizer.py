# EXPECT: param-not-in-optimizer@25
# Multi-task loss weighting by homoscedastic uncertainty (Kendall et al.): the
# log-variances are learnable tensors, but the optimizer is built from the model's
# parameters only, so the weights stay at 0 forever.
import torch
from torch import nn
import torch.nn.functional as F


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(10, 32), nn.ReLU())
        self.reg = nn.Linear(32, 1)
        self.cls = nn.Linear(32, 3)

    def forward(self, x):
        h = self.trunk(x)
        return self.reg(h), self.cls(h)


torch.manual_seed(0)
model = TwoHeads()
log_vars = torch.zeros(2, requires_grad=True)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)  # expect: param-not-in-optimizer
x = torch.randn(512, 10)
y_reg, y_cls = x[:, :1] * 3, (x[:, 1] > 0).long() + (x[:, 2] > 1).long()
for step in range(40):
    idx = torch.randint(0, 512, (32,))
    pred_reg, pred_cls = model(x[idx])
    losses = torch.stack([F.mse_loss(pred_reg, y_reg[idx]), F.cross_entropy(pred_cls, y_cls[idx])])
    loss = (torch.exp(-log_vars) * losses + log_vars).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f} log_vars {log_vars.tolist()}")
