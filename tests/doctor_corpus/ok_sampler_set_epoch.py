# Distributed-style training (world size 1): the shuffling train sampler gets
# set_epoch(epoch) so each epoch has a new order; the validation sampler does not
# shuffle, so it needs no set_epoch.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def make_loaders(world_size, rank):
    torch.manual_seed(0)
    x = torch.randn(640, 10)
    y = (x[:, 0] - x[:, 1] > 0).long()
    train_ds, val_ds = TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])
    train_sampler = DistributedSampler(train_ds, num_replicas=world_size, rank=rank, shuffle=True)
    val_sampler = DistributedSampler(val_ds, num_replicas=world_size, rank=rank, shuffle=False)
    return (
        DataLoader(train_ds, batch_size=32, sampler=train_sampler),
        DataLoader(val_ds, batch_size=64, sampler=val_sampler),
        train_sampler,
    )


train_loader, val_loader, train_sampler = make_loaders(world_size=1, rank=0)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(3):
    train_sampler.set_epoch(epoch)
    model.train()
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader)
    print(f"epoch {epoch}: loss {loss.item():.4f} val acc {correct / 128:.3f}")
