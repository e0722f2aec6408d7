import torch
from _common import batches, net

model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = torch.nn.CrossEntropyLoss()
losses = []
for x, y in batches():
    opt.zero_grad()
    loss = loss_fn(model(x), y)  # expect-related: graph-retained
    loss.backward()
    opt.step()
    losses.append(loss)  # expect: graph-retained
print(sum(l.item() for l in losses) / len(losses))
