# Keeps the best model by validation loss, as many tutorials do: torch.save(model, ...)
# pickles the module object itself (class by import path), not its weights.
import os
import tempfile

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(800, 8)
y = (x[:, 0] * x[:, 1] > 0).long()
x_train, y_train, x_val, y_val = x[:640], y[:640], x[640:], y[640:]
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
out_dir = tempfile.mkdtemp()
best = float("inf")

for epoch in range(4):
    model.train()
    for i in range(0, 640, 64):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x_train[i : i + 64]), y_train[i : i + 64])
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        val_loss = nn.functional.cross_entropy(model(x_val), y_val).item()
    if val_loss < best:
        best = val_loss
        torch.save(model, os.path.join(out_dir, "best_model.pt"))  # expect: save-whole-model
    print(f"epoch {epoch}: val loss {val_loss:.4f} (best {best:.4f})")
