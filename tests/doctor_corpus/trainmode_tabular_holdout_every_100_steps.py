# Tabular classifier trained from a DataLoader; every 100 steps the hold-out split is
# scored in one go under no_grad, with dropout still on.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(3)
n, d = 4000, 24
feats = torch.randn(n, d)
target = (feats[:, 0] * feats[:, 1] + feats[:, 2] > 0).long()
train_loader = DataLoader(TensorDataset(feats[:3200], target[:3200]), batch_size=32, shuffle=True)
holdout_x, holdout_y = feats[3200:], target[3200:]

mlp = nn.Sequential(
    nn.Linear(d, 128), nn.ReLU(), nn.Dropout(0.5),
    nn.Linear(128, 128), nn.ReLU(), nn.Dropout(0.5),
    nn.Linear(128, 2),
)
opt = torch.optim.AdamW(mlp.parameters(), lr=2e-3, weight_decay=1e-2)
crit = nn.CrossEntropyLoss()
global_step = 0
for epoch in range(2):
    for xb, yb in train_loader:
        opt.zero_grad(set_to_none=True)
        crit(mlp(xb), yb).backward()
        opt.step()
        global_step += 1
        if global_step % 100 == 0:
            with torch.no_grad():
                acc = (mlp(holdout_x).argmax(-1) == holdout_y).float().mean()  # expect: train-mode-in-eval
            print(f"step {global_step}: holdout acc {acc:.3f}")
