# The AMP recipe: backward on the scaled loss, unscale_, clip, scaler.step, update.
# (The scaler is disabled on the CPU; the order is what matters.)
import torch
from torch import nn

use_cuda = torch.cuda.is_available()
device = "cuda" if use_cuda else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler(device, enabled=use_cuda)
x = torch.randn(640, 16, device=device)
y = (x[:, :4].argmax(1)).to(device)

for epoch in range(3):
    for i in range(0, 640, 64):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=use_cuda):
            loss = nn.functional.cross_entropy(model(x[i : i + 64]), y[i : i + 64])
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
