# A model ending in nn.Softmax, its output indexed by a mask before cross_entropy.
import torch
from torch import nn

torch.manual_seed(0)
clf = nn.Sequential(nn.Linear(6, 20), nn.ReLU(), nn.Linear(20, 4), nn.Softmax(dim=1))
opt = torch.optim.Adam(clf.parameters(), lr=1e-3)
for step in range(10):
    x, y = torch.randn(32, 6), torch.randint(0, 4, (32,))
    labeled = torch.rand(32) > 0.3
    out = clf(x)
    loss = nn.functional.cross_entropy(out[labeled], y[labeled])  # expect: softmax-before-loss
    opt.zero_grad()
    loss.backward()
    opt.step()
