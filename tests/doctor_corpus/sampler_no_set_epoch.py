# A script written for multi-GPU runs (here world size 1): the DistributedSampler
# shuffles, but without sampler.set_epoch(epoch) every epoch sees the same order.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

world_size, rank = 1, 0
torch.manual_seed(0)
x = torch.randn(512, 10)
y = (x[:, 0] - x[:, 1] > 0).long()
dataset = TensorDataset(x, y)
sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
loader = DataLoader(dataset, batch_size=32, sampler=sampler)

model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(3):
    for xb, yb in loader:  # expect: sampler-epoch-not-set
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
    if rank == 0:
        print(f"epoch {epoch}: loss {loss.item():.4f}")
