# A 5-level severity target (0..4) trained with BCEWithLogitsLoss on one logit, as if it
# were a binary label: targets above 1 are not probabilities, and the loss can go
# below zero and keeps pushing the logits up.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(480, 10)
severity = torch.bucketize(x[:, 0] + 0.5 * x[:, 1], torch.tensor([-1.0, -0.3, 0.3, 1.0]))
loader = DataLoader(TensorDataset(x, severity), batch_size=32, shuffle=True)

model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
criterion = nn.BCEWithLogitsLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for xb, yb in loader:
        logits = model(xb).squeeze(1)
        loss = criterion(logits, yb.float())  # expect: label-out-of-range
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
