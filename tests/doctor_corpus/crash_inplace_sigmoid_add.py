# An in-place add on a sigmoid's output, which autograd saved for its backward.
import torch
from torch import nn

torch.manual_seed(0)
encoder = nn.Linear(6, 12)
opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
for it in range(5):
    x = torch.randn(10, 6)
    gate = torch.sigmoid(encoder(x))
    gate += 0.1  # expect: inplace-modified
    loss = gate.pow(2).mean()
    opt.zero_grad()
    loss.backward()  # expect-related: inplace-modified
    opt.step()
