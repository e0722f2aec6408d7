# EXPECT: scheduler-not-stepped@15
# ReduceLROnPlateau is configured and the validation loss computed every epoch, but
# scheduler.step(val_loss) was never written: the LR never drops.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(400, 6)
y = (x ** 2).sum(1, keepdim=True)
train_loader = DataLoader(TensorDataset(x[:320], y[:320]), batch_size=32, shuffle=True)
val_loader = DataLoader(TensorDataset(x[320:], y[320:]), batch_size=80)
model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.3, patience=1)  # expect: scheduler-not-stepped
best = float("inf")
for epoch in range(4):
    model.train()
    for xb, yb in train_loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        val_loss = sum(nn.functional.mse_loss(model(xb), yb).item() for xb, yb in val_loader)
    best = min(best, val_loss)
    print(f"epoch {epoch} val {val_loss:.4f} best {best:.4f} lr {optimizer.param_groups[0]['lr']}")
