# AMP on the CPU: bfloat16 autocast, a GradScaler, OneCycleLR stepped every batch and a
# function-based train/validate split that keeps epoch predictions on the CPU.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(512, 10)
y = (x[:, :2].sum(1) > 0).long()
train_dl = DataLoader(TensorDataset(x[:384], y[:384]), batch_size=32, shuffle=True)
valid_dl = DataLoader(TensorDataset(x[384:], y[384:]), batch_size=64)

model = nn.Sequential(nn.Linear(10, 32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
epochs = 3
scheduler = torch.optim.lr_scheduler.OneCycleLR(
    optimizer, max_lr=3e-3, total_steps=epochs * len(train_dl)
)
scaler = torch.amp.GradScaler("cpu")
criterion = nn.CrossEntropyLoss()


def train_one_epoch():
    model.train()
    total, n = 0.0, 0
    for xb, yb in train_dl:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(xb)
            loss = criterion(logits, yb)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        total += loss.item() * xb.size(0)
        n += xb.size(0)
    return total / n


def validate():
    model.eval()
    preds, targets = [], []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for xb, yb in valid_dl:
            preds.append(model(xb).float().softmax(1).cpu())
            targets.append(yb)
    preds, targets = torch.cat(preds), torch.cat(targets)
    return (preds.argmax(1) == targets).float().mean().item()


for epoch in range(epochs):
    train_loss = train_one_epoch()
    acc = validate()
    print(f"epoch {epoch}: train loss {train_loss:.3f} val acc {acc:.3f}")
