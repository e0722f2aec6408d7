# Anomaly detection used as intended: around one sanity-check step before training,
# to get a traceback should that step produce a NaN; the training runs without it.
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(512, 6)
y = torch.sin(x[:, :1]) + 0.05 * torch.randn(512, 1)
model = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

with torch.autograd.detect_anomaly():
    loss = nn.functional.mse_loss(model(x[:64]), y[:64])
    loss.backward()
    optimizer.zero_grad()
print("sanity step ok:", loss.item())

for epoch in range(5):
    for i in range(0, 512, 64):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x[i : i + 64]), y[i : i + 64])
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: {loss.item():.4f}")
