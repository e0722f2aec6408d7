# A Trainer class with early stopping: the best weights are copied (state_dict tensors
# carry no graph), the history holds floats, validation runs under inference_mode.
import copy

import torch
from torch import nn
from _common import batches


class EarlyStopping:
    def __init__(self, patience=2, min_delta=0.0):
        self.patience, self.min_delta = patience, min_delta
        self.best = float("inf")
        self.bad_epochs = 0

    def __call__(self, val_loss):
        if val_loss < self.best - self.min_delta:
            self.best, self.bad_epochs = val_loss, 0
            return False
        self.bad_epochs += 1
        return self.bad_epochs >= self.patience


class Trainer:
    def __init__(self, model, lr=0.05):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        self.criterion = nn.CrossEntropyLoss()
        self.history = {"train_loss": [], "val_loss": []}
        self.best_state = None
        self.stopper = EarlyStopping(patience=3)

    def train_epoch(self, data):
        self.model.train()
        running = 0.0
        for x, y in data:
            self.optimizer.zero_grad()
            loss = self.criterion(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            running += loss.item()
        return running / len(data)

    @torch.inference_mode()
    def evaluate(self, data):
        self.model.eval()
        return sum(self.criterion(self.model(x), y).item() for x, y in data) / len(data)

    def fit(self, train, val, epochs=6):
        for epoch in range(epochs):
            self.history["train_loss"].append(self.train_epoch(train))
            val_loss = self.evaluate(val)
            self.history["val_loss"].append(val_loss)
            if val_loss <= min(self.history["val_loss"]):
                self.best_state = copy.deepcopy(self.model.state_dict())
            if self.stopper(val_loss):
                print("early stop at epoch", epoch)
                break
        self.model.load_state_dict(self.best_state)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
data = batches(n=30)
Trainer(model).fit(data[:24], data[24:])
