import torch
from torch import nn

torch.manual_seed(3)
features = torch.randn(120, 4)
prices = features.sum(dim=1, keepdim=True)  # (N, 1) targets
head = nn.Linear(4, 1)
criterion = nn.SmoothL1Loss()
optimizer = torch.optim.SGD(head.parameters(), lr=0.05)
for step in range(30):
    idx = torch.randint(0, 120, (24,))
    out = head(features[idx]).view(-1)  # (N,)
    loss = criterion(out, prices[idx])  # expect: loss-broadcast
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
