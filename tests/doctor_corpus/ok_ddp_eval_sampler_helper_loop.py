# DDP-style script (world size 1, no process group): train and validation loaders each
# with a shuffling DistributedSampler, iterated by helper functions; set_epoch is
# called on the training sampler only, as it should be. A test loader made inline in
# the for statement at the end shuffles too and is read once per call.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split
from torch.utils.data.distributed import DistributedSampler

WORLD, RANK = 1, 0
torch.manual_seed(0)
x = torch.randn(700, 12)
y = (x[:, :3].sum(1) > 0).long()
train_ds, val_ds, test_ds = random_split(TensorDataset(x, y), [448, 128, 124])
train_sampler = DistributedSampler(train_ds, num_replicas=WORLD, rank=RANK, shuffle=True, seed=7)
val_sampler = DistributedSampler(val_ds, num_replicas=WORLD, rank=RANK, shuffle=True, seed=7)
train_loader = DataLoader(train_ds, batch_size=32, sampler=train_sampler, drop_last=True)
val_loader = DataLoader(val_ds, batch_size=32, sampler=val_sampler)
model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)


def train_one_epoch(loader):
    model.train()
    for xb, yb in loader:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()


def evaluate(loader):
    model.eval()
    correct = n = 0
    with torch.inference_mode():
        for xb, yb in loader:
            correct += (model(xb).argmax(1) == yb).sum().item()
            n += len(yb)
    return correct / n


for epoch in range(4):
    train_sampler.set_epoch(epoch)
    train_one_epoch(train_loader)
    print(f"epoch {epoch} val acc {evaluate(val_loader):.3f}")

with torch.no_grad():
    hits = 0
    for xb, yb in DataLoader(test_ds, batch_size=64, sampler=DistributedSampler(
            test_ds, num_replicas=WORLD, rank=RANK)):
        hits += (model(xb).argmax(1) == yb).sum().item()
print(f"test acc {hits / len(test_ds):.3f}")
