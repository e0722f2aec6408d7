import torch
from _common import batches, net


class AverageMeter:
    def __init__(self):
        self.sum = 0.0
        self.count = 0

    def update(self, value, n=1):
        self.sum += value * n  # expect-related: graph-retained
        self.count += n


model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
meter = AverageMeter()
for x, y in batches():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    meter.update(loss, x.shape[0])  # expect: graph-retained
print(meter.sum / meter.count)
