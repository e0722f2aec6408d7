# The whole loop sits under torch.no_grad() (copied from an evaluation script): the loss
# has no graph, and backward raises.
import torch
from torch import nn

torch.manual_seed(0)
x, y = torch.randn(200, 6), torch.randn(200, 1)
net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.05)
with torch.no_grad():
    for i in range(0, 200, 20):
        pred = net(x[i : i + 20])
        loss = nn.functional.mse_loss(pred, y[i : i + 20])  # expect: loss-no-gradient
        opt.zero_grad()
        loss.backward()  # expect-related: loss-no-gradient
        opt.step()
