# Fine-tuning where the freezing loop was meant for the backbone but runs over the whole
# model: nothing requires grad, so the loss has no graph.
import torch
from torch import nn

torch.manual_seed(0)
backbone = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
model = nn.Sequential(backbone, nn.Linear(64, 4))
for p in model.parameters():
    p.requires_grad = False
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(128, 20), torch.randint(0, 4, (128,))
for step in range(5):
    out = model(x)
    loss = nn.functional.cross_entropy(out, y)  # expect: loss-no-gradient
    opt.zero_grad()
    loss.backward()
    opt.step()
