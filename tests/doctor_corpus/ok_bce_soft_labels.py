# Binary classification with label smoothing: BCEWithLogitsLoss gets soft targets
# 0.05 / 0.95, which are valid probabilities.
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(480, 10)
y = (x[:, 0] + 0.5 * x[:, 1] > 0).float()
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
criterion = nn.BCEWithLogitsLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
smoothing = 0.1


def smooth(target):
    return target * (1 - smoothing) + 0.5 * smoothing


for epoch in range(2):
    for i in range(0, 480, 32):
        logits = model(x[i : i + 32]).squeeze(1)
        loss = criterion(logits, smooth(y[i : i + 32]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
