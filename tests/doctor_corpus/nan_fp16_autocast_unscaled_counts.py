# Click counts fed raw (up to ~1e5) to a regressor under float16 autocast, without a
# GradScaler: the first layer's output passes float16's 65504 and the loss is Inf.
import torch
from torch import nn

torch.manual_seed(0)
counts = torch.randint(0, 100_000, (1024, 8)).float()
ctr = torch.rand(1024, 1)
head = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(head.parameters(), lr=1e-4)


def train_epoch():
    for i in range(0, 1024, 128):
        with torch.autocast(device_type="cpu", dtype=torch.float16):  # expect: nonfinite-loss
            pred = head(counts[i : i + 128])
        loss = nn.functional.mse_loss(pred.float(), ctr[i : i + 128])
        opt.zero_grad()
        loss.backward()
        opt.step()


for epoch in range(2):
    train_epoch()
