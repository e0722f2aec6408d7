# The DistributedDataParallel way, launched here as a single process (world size 1,
# gloo on the CPU): what torchrun would run once per GPU.
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
torch.manual_seed(0)
data = TensorDataset(torch.randn(512, 10), torch.randint(0, 3, (512,)))
sampler = DistributedSampler(data, shuffle=True)
loader = DataLoader(data, batch_size=32, sampler=sampler)
model = DDP(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3)))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

for epoch in range(3):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    if dist.get_rank() == 0:
        print(f"epoch {epoch}: loss {loss.item():.3f}")
dist.destroy_process_group()
