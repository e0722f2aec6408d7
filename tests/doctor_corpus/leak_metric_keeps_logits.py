# A metric object (torchmetrics-like) that keeps the logits for an epoch-level metric
# without detaching them, updated from the training loop.
import torch
from _common import batches, net


class EpochAccuracy:
    def __init__(self):
        self.preds, self.targets = [], []

    def update(self, logits, target):
        self.preds.append(logits)  # expect-related: graph-retained
        self.targets.append(target)

    def compute(self):
        preds = torch.cat(self.preds).argmax(1)
        return (preds == torch.cat(self.targets)).float().mean().item()


model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
metric = EpochAccuracy()
for x, y in batches():
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    metric.update(logits, y)  # expect: graph-retained
print("train accuracy", metric.compute())
