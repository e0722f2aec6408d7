# EXPECT: none
# Monte Carlo dropout: after training, the model is put in eval mode and only its
# Dropout layers are switched back on, then T stochastic passes under no_grad give a
# predictive mean and an uncertainty (Gal & Ghahramani).
import torch
from torch import nn

torch.manual_seed(0)
x = torch.linspace(-3, 3, 256).unsqueeze(1)
y = torch.sin(x) + 0.1 * torch.randn_like(x)
model = nn.Sequential(nn.Linear(1, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 64), nn.ReLU(),
                      nn.Dropout(0.1), nn.Linear(64, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
model.train()
for epoch in range(60):
    perm = torch.randperm(256)
    for i in range(0, 256, 64):
        idx = perm[i : i + 64]
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()


def enable_dropout(m):
    if isinstance(m, nn.Dropout):
        m.train()


model.eval()
model.apply(enable_dropout)
x_test = torch.linspace(-4, 4, 9).unsqueeze(1)
with torch.no_grad():
    preds = torch.stack([model(x_test) for _ in range(20)])
mean, std = preds.mean(0).squeeze(1), preds.std(0).squeeze(1)
print("mean", [round(v, 2) for v in mean.tolist()])
print("std ", [round(v, 3) for v in std.tolist()])
