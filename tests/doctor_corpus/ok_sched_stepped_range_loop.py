import torch
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(3, 12), nn.ReLU(), nn.Linear(12, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=200)
for it in range(200):
    xb = torch.rand(32, 3)
    yb = xb.sum(dim=1, keepdim=True)
    loss = nn.functional.mse_loss(net(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
