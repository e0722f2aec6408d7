# EXPECT: none
# Multi-task learning: one shared encoder, one head per task, tasks visited round robin
# (one task per step). Heads get a higher learning rate in their own param group.
import torch
from torch import nn
import torch.nn.functional as F

TASKS = {"sentiment": 3, "topic": 5, "spam": 2}


class MultiTaskModel(nn.Module):
    def __init__(self, dim=16, hidden=32):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.heads = nn.ModuleDict({t: nn.Linear(hidden, n) for t, n in TASKS.items()})

    def forward(self, x, task):
        return self.heads[task](self.encoder(x))


torch.manual_seed(0)
data = {t: (torch.randn(256, 16), torch.randint(0, n, (256,))) for t, n in TASKS.items()}
model = MultiTaskModel()
optimizer = torch.optim.AdamW([
    {"params": model.heads.parameters(), "lr": 3e-3},
    {"params": model.encoder.parameters(), "lr": 1e-3},
], weight_decay=0.01)

task_names = list(TASKS)
for step in range(60):
    task = task_names[step % len(task_names)]
    x, y = data[task]
    idx = torch.randint(0, 256, (32,))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x[idx], task), y[idx])
    loss.backward()
    optimizer.step()
    if step % 15 == 0:
        print(f"step {step} task {task} loss {loss.item():.4f}")
