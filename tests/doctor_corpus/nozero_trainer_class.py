# A small Trainer class; its train_step computes the loss, backpropagates and steps, but
# nothing ever clears the gradients, so every step adds onto all the previous ones.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, lr=1e-3):
        self.model = model
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.criterion = nn.CrossEntropyLoss()

    def train_step(self, xb, yb):
        self.model.train()
        loss = self.criterion(self.model(xb), yb)
        loss.backward()
        self.optimizer.step()  # expect: missing-zero-grad
        return loss.item()

    def fit(self, loader, epochs):
        for epoch in range(epochs):
            losses = [self.train_step(xb, yb) for xb, yb in loader]
            print(f"epoch {epoch}: loss {sum(losses) / len(losses):.4f}")


torch.manual_seed(0)
x = torch.randn(640, 16)
y = (x[:, 0] + x[:, 1] > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
Trainer(model).fit(loader, epochs=2)
