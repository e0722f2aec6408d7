# A tabular regression trainer whose model factory wraps the MLP in DataParallel with
# every visible device (none here: it still runs, on the CPU).
import torch
from torch import nn


def build_model(n_features, hidden=64):
    mlp = nn.Sequential(
        nn.Linear(n_features, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 1),
    )
    return nn.DataParallel(  # expect: data-parallel
        mlp,
        device_ids=list(range(torch.cuda.device_count())) or None,
    )


torch.manual_seed(1)
features = torch.randn(1024, 12)
target = features @ torch.randn(12, 1) + 0.1 * torch.randn(1024, 1)
model = build_model(12)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)

for epoch in range(4):
    perm = torch.randperm(len(features))
    for i in range(0, len(features), 128):
        idx = perm[i : i + 128]
        loss = nn.functional.mse_loss(model(features[idx]), target[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch}: mse {loss.item():.4f}")
