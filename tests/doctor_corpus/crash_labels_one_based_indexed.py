# Survey answers coded 1..4 used as class indices for a 4-way head, batches cut from the
# full tensors by random indices: the label 4 is outside [0, 4).
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
answers = torch.randn(320, 16)
codes = torch.randint(1, 5, (320,))  # expect: label-out-of-range
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
for step in range(30):
    pick = torch.randint(0, 320, (32,))
    loss = F.cross_entropy(net(answers[pick]), codes[pick])  # expect-related: label-out-of-range
    opt.zero_grad()
    loss.backward()
    opt.step()
