# An MLP on flattened 8x8 digits whose last layer was written nn.Linear(128, 9): ten
# digit classes, nine outputs.
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
digits = torch.rand(400, 64)
classes = torch.arange(400) % 10
model = nn.Sequential(
    nn.Flatten(),
    nn.Linear(64, 128),
    nn.ReLU(),
    nn.Linear(128, 9),  # expect: label-out-of-range
)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    idx = torch.randint(0, 400, (32,))
    logits = model(digits[idx])
    loss = F.cross_entropy(logits, classes[idx])  # expect-related: label-out-of-range
    opt.zero_grad()
    loss.backward()
    opt.step()
