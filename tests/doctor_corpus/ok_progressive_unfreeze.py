# EXPECT: none
# Linear probing first, then full fine-tuning: the optimizer holds every parameter from
# the start, but the backbone runs without grad until `unfreeze_at` steps, after which
# it trains with the head (the backbone's LR group is small).
import torch
from torch import nn


class Finetuner(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 3)
        self.train_backbone = False

    def forward(self, x):
        with torch.set_grad_enabled(self.train_backbone and torch.is_grad_enabled()):
            feats = self.backbone(x)
        return self.head(feats)


torch.manual_seed(0)
model = Finetuner()
optimizer = torch.optim.Adam([
    {"params": model.backbone.parameters(), "lr": 1e-4},
    {"params": model.head.parameters(), "lr": 1e-2},
])
x = torch.randn(1024, 16)
y = (x[:, 0] > 0.5).long() + (x[:, 1] > 0).long()
unfreeze_at, steps = 120, 160
for step in range(steps):
    if step == unfreeze_at:
        model.train_backbone = True
        print("unfreezing the backbone")
    idx = torch.randint(0, 1024, (32,))
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
    loss.backward()
    optimizer.step()
    if step % 40 == 0:
        print(f"step {step} loss {loss.item():.4f}")
print(f"final loss {loss.item():.4f}")
