# (review script) written to the doctor's spec; expected: loss-not-decreasing@17
# Hand-written SGD (no torch.optim) whose update uses the out-of-place p.sub(...): the
# result is thrown away and the weights never change. 300 steps, flat loss.
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
x = torch.randn(3000, 10)
y = (x[:, 0] - x[:, 1] > 0).long()
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
lr = 0.1
for step in range(300):
    idx = torch.randint(0, 3000, (64,))
    loss = F.cross_entropy(model(x[idx]), y[idx])
    model.zero_grad()
    loss.backward()  # expect: loss-not-decreasing
    with torch.no_grad():
        for p in model.parameters():
            p.sub(lr * p.grad)
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.4f}")
