# A multi-task model with one head per task in an nn.ModuleDict.
import torch
from torch import nn


class MultiTask(nn.Module):
    def __init__(self, tasks):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 48), nn.ReLU())
        self.heads = nn.ModuleDict({name: nn.Linear(48, n_out) for name, n_out in tasks.items()})

    def forward(self, x):
        h = self.trunk(x)
        return {name: head(h) for name, head in self.heads.items()}


torch.manual_seed(0)
x = torch.randn(640, 12)
targets = {"kind": (x[:, 0] > 0).long(), "size": x[:, 1:3] * 2.0}
model = MultiTask({"kind": 2, "size": 2})
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(40):
    idx = torch.randint(0, 640, (32,))
    out = model(x[idx])
    loss = nn.functional.cross_entropy(out["kind"], targets["kind"][idx])
    loss = loss + nn.functional.mse_loss(out["size"], targets["size"][idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"final loss {loss.item():.4f}")
