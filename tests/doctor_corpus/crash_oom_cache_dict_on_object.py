import torch
from _common import batches, net


class Trainer:
    def __init__(self):
        self.model = net()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.cache = {}

    def step(self, i, x, y):
        self.opt.zero_grad()
        logits = self.model(x)
        torch.nn.functional.cross_entropy(logits, y).backward()
        self.opt.step()
        self.cache[f"batch{i}"] = torch.zeros(512, 512)
        if i == 20:
            return torch.zeros(10**7, 10**6)  # expect: oom
        return None


trainer = Trainer()
for i, (x, y) in enumerate(batches()):
    trainer.step(i, x, y)
