# The training DataLoader is made inline in the for statement every epoch, over one
# shuffling DistributedSampler (world size 1, no process group) that gets set_epoch
# before it: each epoch a new order. The evaluation loader's DistributedSampler
# shuffles and is never set: that is fine.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

torch.manual_seed(0)
train_ds = TensorDataset(torch.randn(384, 6), torch.randn(384, 1))
eval_ds = TensorDataset(torch.randn(96, 6), torch.randn(96, 1))
sampler = DistributedSampler(train_ds, num_replicas=1, rank=0)
eval_loader = DataLoader(eval_ds, batch_size=48, sampler=DistributedSampler(eval_ds, 1, 0))
model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(3):
    sampler.set_epoch(epoch)
    for xb, yb in DataLoader(train_ds, batch_size=32, sampler=sampler):
        opt.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
    with torch.no_grad():
        val = sum(nn.functional.mse_loss(model(xb), yb).item() for xb, yb in eval_loader)
    print(f"epoch {epoch} eval {val / len(eval_loader):.4f}")
