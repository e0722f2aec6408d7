# A churn model whose loss is computed on rounded predictions (to "match" the 0/1
# labels): torch.round has a zero gradient, so every weight's gradient is zero.
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
        preds = torch.round(torch.sigmoid(model(xb).squeeze(-1)))
        loss = loss_fn(preds, yb)  # expect: loss-no-gradient
        loss.backward()  # expect-related: loss-no-gradient
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
