import torch
from _common import batches, net

model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i, (x, y) in enumerate(batches()):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if i == 5:
        scratch = torch.empty(10**13)  # expect: oom
