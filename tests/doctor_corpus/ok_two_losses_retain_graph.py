# Two losses over one shared graph with separate backward calls: the first keeps the
# graph (retain_graph=True) because the second goes through it; the second frees it.
import torch
from torch import nn
from _common import batches

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
cls_head, recon_head = nn.Linear(16, 2), nn.Linear(16, 8)
params = [*encoder.parameters(), *cls_head.parameters(), *recon_head.parameters()]
opt = torch.optim.SGD(params, lr=0.05)
for x, y in batches():
    opt.zero_grad()
    z = encoder(x)
    cls_loss = nn.functional.cross_entropy(cls_head(z), y)
    recon_loss = nn.functional.mse_loss(recon_head(z), x)
    cls_loss.backward(retain_graph=True)
    (0.1 * recon_loss).backward()
    opt.step()
