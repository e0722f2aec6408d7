import torch
from torch import nn

torch.manual_seed(0)
rnn = nn.RNNCell(4, 8)
head = nn.Linear(8, 1)
opt = torch.optim.SGD(list(rnn.parameters()) + list(head.parameters()), lr=0.01)
h = torch.zeros(2, 8)
for step in range(12):
    h = rnn(torch.randn(2, 4), h)  # expect: graph-retained
    loss = head(h).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # expect-related: graph-retained
    opt.step()
