# The whole training set standardized once, per pixel, before it is wrapped in a
# TensorDataset: the constant border pixels have std 0 and the precomputed tensor holds
# NaN in every sample.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.zeros(600, 1, 10, 10)
X[:, :, 2:8, 2:8] = torch.rand(600, 1, 6, 6)
y = torch.randint(0, 10, (600,))
X = (X - X.mean(dim=0)) / X.std(dim=0)  # expect: nonfinite-input

train_ds = TensorDataset(X, y)
train_dl = DataLoader(train_ds, batch_size=100, shuffle=True)
model = nn.Sequential(nn.Flatten(), nn.Linear(100, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_func = nn.CrossEntropyLoss()
for epoch in range(2):
    for xb, yb in train_dl:  # expect-related: nonfinite-input
        loss = loss_func(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()
