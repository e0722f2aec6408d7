import torch
from _common import batches, net

model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in batches():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward(retain_graph=True)  # expect: retain-graph
    opt.step()
