# Tabular regression from a numpy table where a few sensor readings are missing (NaN);
# the rows go to the model as they are.
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SensorTable(Dataset):
    def __init__(self, table, target):
        self.table = table.astype(np.float32)
        self.target = target.astype(np.float32)

    def __len__(self):
        return len(self.table)

    def __getitem__(self, i):
        return torch.from_numpy(self.table[i]), torch.tensor(self.target[i])


rng = np.random.default_rng(0)
table = rng.normal(size=(600, 8))
target = table @ rng.normal(size=8) + 0.1 * rng.normal(size=600)
table[rng.choice(600, size=5, replace=False), rng.integers(0, 8, size=5)] = np.nan

torch.manual_seed(0)
loader = DataLoader(SensorTable(table, target), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.MSELoss()
for epoch in range(2):
    for features, y in loader:  # expect: nonfinite-input
        optimizer.zero_grad()
        loss = loss_fn(model(features).squeeze(1), y)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: mse {loss.item():.4f}")
