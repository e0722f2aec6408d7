# (review script) written to the doctor's spec; expected: nonfinite-loss@20
# Heteroscedastic regression on standardized sensor readings: the std head's
# output is exponentiated in place (.exp_(), to save memory) and overflows to inf on a
# large reading; the Gaussian NLL is then inf.
import math

import torch
from torch import nn


class GaussianHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 32), nn.Tanh())
        self.mu = nn.Linear(32, 1)
        self.log_std = nn.Linear(3, 1)

    def forward(self, x):
        h = self.body(x)
        std = self.log_std(x).exp_()  # expect: nonfinite-loss
        return self.mu(h).squeeze(1), std.squeeze(1)


torch.manual_seed(0)
x = torch.randn(600, 3)
x[450, 2] = 2500.0  # a sensor glitch: a huge but finite reading
y = x[:, 0] + 0.5 * x[:, 1] + 0.5 * torch.randn(600)
model = GaussianHead()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for i in range(0, 600, 50):
        mu, std = model(x[i : i + 50])
        nll = torch.log(std) + 0.5 * ((y[i : i + 50] - mu) / std) ** 2 + 0.5 * math.log(2 * math.pi)
        loss = nll.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
