# A model whose forward masks, in place, a tensor an earlier multiplication saved.
import torch
from torch import nn


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(5, 7)
        self.out = nn.Linear(7, 1)

    def forward(self, x, mask):
        h = torch.tanh(self.proj(x))
        weighted = h * h
        h.masked_fill_(mask, 0.0)  # expect: inplace-modified
        return self.out(weighted + h)


torch.manual_seed(1)
net = Scorer()
optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
for batch in range(4):
    inputs = torch.randn(8, 5)
    mask = torch.rand(8, 7) > 0.5
    pred = net(inputs, mask)
    loss = (pred.squeeze(-1) - 1).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
