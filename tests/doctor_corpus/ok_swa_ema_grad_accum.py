# Gradient accumulation with a per-batch cosine schedule, an EMA of the weights with
# torch.optim.swa_utils.AveragedModel, detached losses kept for the epoch mean and the
# gradient norms returned by clip_grad_norm_ kept for a plot.
import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from _common import batches, net

model = net()
ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.95))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
accum_steps = 4
data = batches(n=48)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=2 * len(data) // accum_steps)
grad_norms = []
for epoch in range(2):
    model.train()
    epoch_losses = []
    optimizer.zero_grad()
    for i, (x, y) in enumerate(data[:40]):
        loss = nn.functional.cross_entropy(model(x), y)
        (loss / accum_steps).backward()
        epoch_losses.append(loss.detach())
        if (i + 1) % accum_steps == 0:
            grad_norms.append(nn.utils.clip_grad_norm_(model.parameters(), 5.0))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            ema_model.update_parameters(model)
    ema_model.eval()
    with torch.no_grad():
        acc = torch.stack([(ema_model(x).argmax(1) == y).float().mean() for x, y in data[40:]])
    print(epoch, torch.stack(epoch_losses).mean().item(), acc.mean().item())
