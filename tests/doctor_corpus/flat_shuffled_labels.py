# The labels are shuffled independently of the inputs in every batch (a collate bug
# that permutes one of the two), so there is nothing to learn: the loss stays at ln(2).
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def collate(samples):
    xs = torch.stack([s[0] for s in samples])
    ys = torch.stack([s[1] for s in samples])
    return xs, ys[torch.randperm(len(ys))]


torch.manual_seed(0)
x = torch.randn(4800, 10)
y = (x[:, 0] + x[:, 1] > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, collate_fn=collate)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
criterion = nn.CrossEntropyLoss()
for step, (xb, yb) in enumerate(loader):
    optimizer.zero_grad()
    loss = criterion(model(xb), yb)
    loss.backward()  # expect: loss-not-decreasing
    optimizer.step()
    if step % 50 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
