import torch
from _common import batches, net

model = net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 5))  # warmup
losses, running = [], 0.0
accum = 4
for i, (x, y) in enumerate(batches(n=48)):
    loss = torch.nn.functional.cross_entropy(model(x), y) / accum
    loss.backward()
    running += loss.item()
    if (i + 1) % accum == 0:
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(running)
        running = 0.0
print(losses[-1])
