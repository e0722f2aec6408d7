# A Trainer whose evaluate() switches to eval mode but runs with grad enabled.
import torch
from torch import nn
from _common import batches


class Trainer:
    def __init__(self):
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-2)
        self.loss_fn = nn.CrossEntropyLoss()
        self.best = float("inf")

    def training_step(self, x, y):
        self.optimizer.zero_grad()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def evaluate(self, data):
        self.model.eval()
        total = 0.0
        for x, y in data:
            logits = self.model(x)  # expect: eval-builds-graph
            total += self.loss_fn(logits, y).item()
        self.model.train()
        return total / len(data)

    def fit(self, data, epochs=3):
        for epoch in range(epochs):
            for x, y in data[:30]:
                self.training_step(x, y)
            val = self.evaluate(data[30:])
            self.best = min(self.best, val)
            print(epoch, val)


Trainer().fit(batches())
