import torch
from _common import batches, net

model = net()
activations = []
model[0].register_forward_hook(lambda m, i, o: activations.append(o))  # expect: graph-retained
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in batches():
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
