import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(768, 10)
y = x @ torch.randn(10) + 0.1 * torch.randn(768)
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)

model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.MSELoss()

for epoch in range(3):
    total = 0.0
    for xb, yb in loader:
        optimizer.zero_grad()
        pred = model(xb).squeeze(1)
        loss = criterion(pred, yb)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(xb)
    print(f"epoch {epoch}: mse {total / len(x):.4f}")
