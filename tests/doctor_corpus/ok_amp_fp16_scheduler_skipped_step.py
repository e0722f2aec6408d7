# float16 autocast with a GradScaler and a per-batch warmup schedule. The scaler's first
# step overflows and is skipped, so PyTorch warns that the scheduler stepped before the
# optimizer; that is expected with AMP and harmless.
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(1024, 16)
y = (x[:, 0] * x[:, 1] > 0).long()
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
warmup = 10
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24)

for epoch in range(3):
    perm = torch.randperm(len(x))
    for i in range(0, len(x), 64):
        idx = perm[i : i + 64]
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
    print(f"epoch {epoch}: loss {loss.item():.4f} scale {scaler.get_scale():.0f}")
