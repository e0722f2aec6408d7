# Gradient accumulation with retain_graph=True "to be safe" on every micro-batch.
import torch
from _common import batches, net

model = net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
accum = 2
opt.zero_grad()
for i, (x, y) in enumerate(batches()):
    loss = torch.nn.functional.cross_entropy(model(x), y) / accum
    loss.backward(retain_graph=True)  # expect: retain-graph
    if (i + 1) % accum == 0:
        opt.step()
        opt.zero_grad()
