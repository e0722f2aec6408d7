# EXPECT: unregistered-module@12
# A mixture-of-experts layer that keeps its experts in a tuple (built with a generator
# expression): the router trains, the experts never do.
import torch
from torch import nn


class MoE(nn.Module):
    def __init__(self, d, n_experts=4):
        super().__init__()
        self.router = nn.Linear(d, n_experts)
        self.experts = tuple(nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))  # expect: unregistered-module
                             for _ in range(n_experts))

    def forward(self, x):
        weights = self.router(x).softmax(-1)
        outs = torch.stack([e(x) for e in self.experts], dim=-1)
        return (outs * weights.unsqueeze(-2)).sum(-1)


class Net(nn.Module):
    def __init__(self, d=12):
        super().__init__()
        self.moe = MoE(d)
        self.out = nn.Linear(d, 1)

    def forward(self, x):
        return self.out(torch.relu(self.moe(x)))


torch.manual_seed(0)
net = Net()
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
x = torch.randn(256, 12)
y = x[:, :2].prod(1, keepdim=True)
for step in range(30):
    idx = torch.randint(0, 256, (32,))
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(net(x[idx]), y[idx])
    loss.backward()
    optimizer.step()
print(f"final loss {loss.item():.4f}")
