# Star ratings 1..5 shifted to class indices 0..4 for a 5-class head.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
features = torch.randn(400, 24)
ratings = torch.bucketize(features[:, :4].sum(1), torch.tensor([-2.0, -0.7, 0.7, 2.0])) + 1
loader = DataLoader(TensorDataset(features, ratings - 1), batch_size=40, shuffle=True)

model = nn.Sequential(nn.Linear(24, 48), nn.ReLU(), nn.Linear(48, 5))
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for xb, yb in loader:
        out = model(xb)
        loss = criterion(out, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
