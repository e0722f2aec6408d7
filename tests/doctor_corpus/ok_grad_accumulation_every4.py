# Gradient accumulation: four micro-batches of 16 make one effective batch of 64; the
# gradients are cleared after each optimizer step, every fourth micro-batch.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUM = 4
torch.manual_seed(0)
x = torch.randn(1024, 16)
y = (x[:, 0] + x[:, 1] > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
criterion = nn.CrossEntropyLoss()

for epoch in range(2):
    optimizer.zero_grad()
    for i, (xb, yb) in enumerate(loader):
        loss = criterion(model(xb), yb) / ACCUM
        loss.backward()
        if (i + 1) % ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()
    print(f"epoch {epoch}: last loss {loss.item() * ACCUM:.4f}")
