# A multi-head model returning a dict, and a loss module with state: it balances the two
# heads with running averages kept in buffers, updated from detached values.
import torch
from torch import nn
from _common import batches


class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
        self.cls = nn.Linear(32, 2)
        self.reg = nn.Linear(32, 1)

    def forward(self, x):
        h = self.trunk(x)
        return {"logits": self.cls(h), "value": self.reg(h).squeeze(-1)}


class BalancedLoss(nn.Module):
    def __init__(self, momentum=0.9):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("avg_cls", torch.ones(()))
        self.register_buffer("avg_reg", torch.ones(()))
        self.calls = 0
        self.last = {}

    def forward(self, out, y, target_value):
        cls = nn.functional.cross_entropy(out["logits"], y)
        reg = nn.functional.mse_loss(out["value"], target_value)
        with torch.no_grad():
            self.avg_cls.mul_(self.momentum).add_(cls.detach(), alpha=1 - self.momentum)
            self.avg_reg.mul_(self.momentum).add_(reg.detach(), alpha=1 - self.momentum)
        self.calls += 1
        self.last = {"cls": cls.item(), "reg": reg.item()}
        return cls / self.avg_cls + reg / self.avg_reg


torch.manual_seed(0)
model = MultiHead()
criterion = BalancedLoss()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
log = {"cls": [], "reg": []}
for epoch in range(2):
    for x, y in batches():
        out = model(x)
        loss = criterion(out, y, x[:, 1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        for k, v in criterion.last.items():
            log[k].append(v)
print({k: sum(v) / len(v) for k, v in log.items()})
