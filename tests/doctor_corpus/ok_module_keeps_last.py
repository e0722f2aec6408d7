import torch
from torch import nn
from _common import batches


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 2)
        self.last = None

    def forward(self, x):
        self.last = self.body(x)  # replaced every step: bounded, not a leak
        return self.last


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in batches():
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
