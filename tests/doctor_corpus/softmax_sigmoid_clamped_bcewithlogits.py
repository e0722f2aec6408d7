# (review script) written to the doctor's spec; expected: softmax-before-loss@29
# Multi-label classifier whose forward returns probabilities, clamped away from 0 and 1
# "for numerical safety" (left over from when the loss was nn.BCELoss), now trained
# with BCEWithLogitsLoss, which applies the sigmoid again.
import torch
from torch import nn

torch.manual_seed(0)
n, d, k = 1600, 20, 5
x = torch.randn(n, d)
y = ((x[:, :k] + 0.3 * torch.randn(n, k)) > 0.5).float()


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, k))

    def forward(self, x):
        return torch.sigmoid(self.body(x)).clamp(1e-6, 1 - 1e-6)


model = Tagger()
criterion = nn.BCEWithLogitsLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(4):
    for i in range(0, n, 64):
        probs = model(x[i : i + 64])
        loss = criterion(probs, y[i : i + 64])  # expect: softmax-before-loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
