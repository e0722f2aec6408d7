# (review script) written to the doctor's spec; expected: nonfinite-input@31 (the loss line, where the NaN targets enter)
# Tabular regression read from CSV text: one row's target is empty ("" -> nan), the
# features are all present; batches are sliced by hand (no DataLoader).
import csv
import io
import random

import torch
from torch import nn

random.seed(0)
lines = ["sqft,rooms,age,price"]
for i in range(600):
    sqft, rooms, age = random.uniform(50, 250), random.randint(1, 6), random.uniform(0, 80)
    price = "" if i == 437 else f"{1.5 * sqft + 20 * rooms - 0.8 * age + random.gauss(0, 10):.1f}"
    lines.append(f"{sqft:.1f},{rooms},{age:.1f},{price}")
rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
X = torch.tensor([[float(r["sqft"]), float(r["rooms"]), float(r["age"])] for r in rows])
y = torch.tensor([float(r["price"] or "nan") for r in rows])
X = (X - X.mean(0)) / X.std(0)
y_mean, y_std = y.nanmean(), torch.tensor(y[~y.isnan()].std().item())
y = (y - y_mean) / y_std

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    for i in range(0, len(X), 50):
        xb, yb = X[i : i + 50], y[i : i + 50]
        pred = model(xb).squeeze(1)
        loss = nn.functional.mse_loss(pred, yb)  # expect: nonfinite-input
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
