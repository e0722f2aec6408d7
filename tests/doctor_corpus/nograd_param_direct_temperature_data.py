# A contrastive-style classifier with a learned temperature, read through .data in the
# forward: the temperature is in the optimizer but never gets a gradient.
import torch
import torch.nn.functional as F
from torch import nn


class TempScaled(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.proj = nn.Linear(dim, classes)
        self.log_t = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        return self.proj(x) / self.log_t.data.exp()  # expect: param-without-grad


torch.manual_seed(0)
x, y = torch.randn(600, 12), torch.randint(0, 4, (600,))
clf = TempScaled(12, 4)
optim = torch.optim.AdamW(clf.parameters(), lr=3e-3)
for epoch in range(6):
    for i in range(0, 600, 40):
        loss = F.cross_entropy(clf(x[i : i + 40]), y[i : i + 40])
        optim.zero_grad()
        loss.backward()
        optim.step()
