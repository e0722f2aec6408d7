# Multi-label tagging: the forward already applies sigmoid, then BCEWithLogitsLoss
# applies it a second time, so the loss can never get near zero.
import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.fc2 = nn.Linear(64, 5)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def train(model, x, y, steps=60):
    criterion = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(steps):
        idx = torch.randint(0, len(x), (32,))
        probs = torch.sigmoid(model(x[idx]))
        loss = criterion(probs, y[idx])  # expect: softmax-before-loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


torch.manual_seed(0)
x = torch.randn(800, 20)
y = (x[:, :5] > 0.3).float()
print(f"final loss {train(Tagger(), x, y):.4f}")
