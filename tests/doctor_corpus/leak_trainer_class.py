import torch
from torch import nn
from _common import batches


class Trainer:
    def __init__(self):
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.step_losses = {}

    def train_step(self, step, x, y):
        self.opt.zero_grad()
        loss = nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss

    def fit(self):
        for step, (x, y) in enumerate(batches()):
            loss = self.train_step(step, x, y)
            self.step_losses[step] = loss  # expect: graph-retained


Trainer().fit()
