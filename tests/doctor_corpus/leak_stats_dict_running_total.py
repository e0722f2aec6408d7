# Running statistics kept in a dict: the loss tensor itself is summed in, so the total
# carries every step's graph.
import torch
from torch import nn

torch.manual_seed(0)
x, y = torch.randn(512, 10), torch.randint(0, 3, (512,))
net = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 3))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
stats = {"total": 0.0, "batches": 0}
for epoch in range(3):
    for i in range(0, 512, 64):
        loss = nn.functional.cross_entropy(net(x[i : i + 64]), y[i : i + 64])
        opt.zero_grad()
        loss.backward()
        opt.step()
        stats["total"] += loss  # expect: graph-retained
        stats["batches"] += 1
    print(f"epoch {epoch}: mean loss {stats['total'] / stats['batches']:.3f}")
