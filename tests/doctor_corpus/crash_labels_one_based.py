# Star ratings 1..5 used directly as class indices for a 5-class head: the rating 5 is
# "class 5", outside [0, 5), and cross_entropy raises on the CPU.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
features = torch.randn(400, 24)
ratings = torch.bucketize(features[:, :4].sum(1), torch.tensor([-2.0, -0.7, 0.7, 2.0])) + 1  # expect: label-out-of-range
loader = DataLoader(TensorDataset(features, ratings), batch_size=40, shuffle=True)

model = nn.Sequential(nn.Linear(24, 48), nn.ReLU(), nn.Linear(48, 5))
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for xb, yb in loader:
        out = model(xb)
        loss = criterion(out, yb)  # expect-related: label-out-of-range
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
