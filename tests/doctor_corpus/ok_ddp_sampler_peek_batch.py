# EXPECT: none
# DistributedSampler with set_epoch each epoch; before training, one batch is taken
# with next(iter(loader)) to size the model's input layer and print the shapes.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

torch.manual_seed(0)
dataset = TensorDataset(torch.randn(256, 14), torch.randint(0, 4, (256,)))
train_sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True)
train_loader = DataLoader(dataset, batch_size=32, sampler=train_sampler)

sample_x, sample_y = next(iter(train_loader))
print(f"input batch {tuple(sample_x.shape)}, labels {tuple(sample_y.shape)}")
model = nn.Sequential(nn.Linear(sample_x.shape[1], 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

for epoch in range(3):
    train_sampler.set_epoch(epoch)
    total = 0.0
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        total += loss.item()
    print(f"epoch {epoch} loss {total / len(train_loader):.4f}")
