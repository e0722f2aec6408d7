# Polynomial features fitted by SGD with LR = 3.0 set at the top of the file (about a
# hundred times what these unscaled features allow): the loss climbs by orders of
# magnitude and overflows.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

LR = 3.0  # expect-related: nonfinite-loss
EPOCHS = 3

torch.manual_seed(0)
t = torch.rand(1024, 1) * 4
features = torch.cat([t, t**2, t**3], dim=1)
target = torch.sin(t).squeeze(1)
loader = DataLoader(TensorDataset(features, target), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 1))
loss_fn = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=LR)  # expect-related: nonfinite-loss
for epoch in range(EPOCHS):
    for xb, yb in loader:
        pred = model(xb).squeeze(1)
        loss = loss_fn(pred, yb)  # expect: nonfinite-loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
