# Mixed-precision (float16) training on the CPU with a GradScaler: the scaler starts at a
# large scale and skips its first steps while the scale settles, then trains normally.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(1024, 20)
y = (x[:, :5].sum(1) > 0).long() + (x[:, 5] > 1).long()
loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)
criterion = nn.CrossEntropyLoss()

for epoch in range(4):
    running = 0.0
    for xb, yb in loader:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = criterion(model(xb), yb)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        running += loss.item()
    print(f"epoch {epoch}: loss {running / len(loader):.4f} scale {scaler.get_scale():.0f}")
