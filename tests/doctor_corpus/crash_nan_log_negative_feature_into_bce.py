# A click-through model that log-transforms its count features inside the forward;
# the features were standardized upstream, so some are negative: log gives NaN, the
# sigmoid passes it on and nn.BCELoss raises at the first batch.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class CTRModel(nn.Module):
    def __init__(self, n_dense=6, n_ids=50, dim=8):
        super().__init__()
        self.ids = nn.Embedding(n_ids, dim)
        self.mlp = nn.Sequential(nn.Linear(n_dense + dim, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, dense, ids):
        dense = torch.log(dense + 1)  # expect: nonfinite-loss
        h = torch.cat([dense, self.ids(ids)], dim=1)
        return torch.sigmoid(self.mlp(h)).squeeze(1)


torch.manual_seed(0)
counts = torch.poisson(torch.full((512, 6), 3.0))
dense = (counts - counts.mean(0)) / counts.std(0)  # standardized: negative values
ids = torch.randint(0, 50, (512,))
clicks = (torch.rand(512) < 0.2).float()
loader = DataLoader(TensorDataset(dense, ids, clicks), batch_size=64, shuffle=True)
model = CTRModel()
criterion = nn.BCELoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for x, i, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x, i), y)  # expect-related: nonfinite-loss
        loss.backward()
        optimizer.step()
