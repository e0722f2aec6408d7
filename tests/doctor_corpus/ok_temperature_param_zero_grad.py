import torch
from torch import nn


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.temperature = nn.Parameter(torch.ones(1))
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))

    def forward(self, x):
        return self.body(x) / self.temperature


torch.manual_seed(0)
model = Scaled()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for it in range(20):
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
