# A GRU state carried across batches, with retain_graph=True to silence the "second
# backward" error: the kept graph needs weights the optimizer has changed since.
import torch
from torch import nn

torch.manual_seed(0)
cell = nn.GRUCell(3, 10)
readout = nn.Linear(10, 1)
opt = torch.optim.SGD([*cell.parameters(), *readout.parameters()], lr=0.01)
state = torch.zeros(4, 10)
series = torch.randn(50, 4, 3)
for t in range(20):
    state = cell(series[t], state)  # expect: inplace-modified
    loss = readout(state).pow(2).mean()
    opt.zero_grad()
    loss.backward(retain_graph=True)  # expect-related: inplace-modified
    opt.step()
