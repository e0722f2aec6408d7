# A house-price regressor whose --lr default was typed as 2.0 instead of 0.02 (100x too
# high): the first updates overshoot, the loss climbs by orders of magnitude and then
# turns Inf/NaN.
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description="tabular regression")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=2.0, help="learning rate")  # expect-related: nonfinite-loss
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()

torch.manual_seed(0)
features = torch.randn(512, 10) * 2.0
prices = features @ torch.randn(10) + 3.0

model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)  # expect-related: nonfinite-loss
for epoch in range(args.epochs):
    perm = torch.randperm(len(features))
    for i in range(0, len(features), args.batch_size):
        idx = perm[i:i + args.batch_size]
        optimizer.zero_grad()
        loss = criterion(model(features[idx]).squeeze(1), prices[idx])  # expect: nonfinite-loss
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: mse {loss.item():.4g}")
