import torch
from torch import nn

torch.manual_seed(0)
X, y = torch.randn(256, 10), torch.randn(256, 1)
Xv, yv = torch.randn(64, 10), torch.randn(64, 1)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
crit = nn.MSELoss()
train_losses, val_losses = [], []
for epoch in range(60):
    model.train()
    opt.zero_grad()
    loss = crit(model(X), y)
    loss.backward()
    opt.step()
    train_losses.append(loss.item())
    model.eval()
    val_loss = crit(model(Xv), yv)  # expect: eval-builds-graph
    val_losses.append(val_loss)  # expect: graph-retained
print(val_losses[-1].item())
