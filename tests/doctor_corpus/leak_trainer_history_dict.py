# A Keras-style history dict on the Trainer, filled with the loss tensors of every step.
import torch
from torch import nn
from _common import batches


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.history = {"loss": [], "lr": []}

    def fit(self, data):
        for x, y in data:
            self.optimizer.zero_grad()
            loss = nn.functional.cross_entropy(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            self.history["loss"].append(loss)  # expect: graph-retained
            self.history["lr"].append(self.optimizer.param_groups[0]["lr"])


torch.manual_seed(0)
trainer = Trainer(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
trainer.fit(batches())
print(sum(l.item() for l in trainer.history["loss"]) / len(trainer.history["loss"]))
