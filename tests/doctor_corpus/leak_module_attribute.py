import torch
from torch import nn
from _common import batches


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 2)
        self.history = []

    def forward(self, x):
        out = self.body(x)
        self.history.append(out)  # expect: graph-retained
        return out


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in batches():
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
