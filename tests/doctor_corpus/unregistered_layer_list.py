# A residual MLP whose blocks are kept in a plain Python list: model.parameters() does
# not see them, so the optimizer never updates them (nor would .to() move them).
import torch
from torch import nn


def make_block(dim):
    return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU())


class ResidualMLP(nn.Module):
    def __init__(self, dim, depth, n_classes):
        super().__init__()
        self.stem = nn.Linear(20, dim)
        self.blocks = [make_block(dim) for _ in range(depth)]  # expect: unregistered-module
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


torch.manual_seed(0)
x = torch.randn(512, 20)
y = (x[:, :3].sum(1) > 0).long() + (x[:, 3] > 0.5).long()
model = ResidualMLP(dim=32, depth=3, n_classes=3)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
for epoch in range(3):
    perm = torch.randperm(512)
    for i in range(0, 512, 64):
        idx = perm[i : i + 64]
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
