# The twin of nograd_loss_rounded_predictions: the loss is computed on the
# probabilities; rounding is kept for the accuracy only.
import torch
from torch import nn

torch.manual_seed(0)
customers = torch.randn(2048, 10)
churned = (customers[:, 0] - customers[:, 3] > 0.5).float()
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.MSELoss()

for epoch in range(3):
    for start in range(0, len(customers), 128):
        xb, yb = customers[start:start + 128], churned[start:start + 128]
        optimizer.zero_grad()
        probs = torch.sigmoid(model(xb).squeeze(-1))
        loss = loss_fn(probs, yb)
        loss.backward()
        optimizer.step()
    acc = (torch.round(probs) == yb).float().mean()
    print(f"epoch {epoch}: loss {loss.item():.4f} acc {acc:.3f}")
