# EXPECT: sampler-epoch-not-set@23
# Batch-size ramp-up: the DataLoader and its DistributedSampler are rebuilt every epoch
# with a larger batch size, and set_epoch is never called: every fresh sampler shuffles
# with seed + 0, so every epoch visits the samples in exactly the same order.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

torch.manual_seed(0)
dataset = TensorDataset(torch.randn(512, 12), torch.randint(0, 3, (512,)))


def make_loader(batch_size):
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(3):
    loader = make_loader(batch_size=32 * 2 ** epoch)
    for xb, yb in loader:  # expect: sampler-epoch-not-set
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} batches {len(loader)} loss {loss.item():.4f}")
