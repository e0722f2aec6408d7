# Grades 1..3 stored for a 3-way classifier and moved to the device batch by batch
# (yb = yb.to(dev)): the labels were made 1-based where the data set was built.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
feats = torch.randn(200, 6)
grades = torch.randint(1, 4, (200,))  # expect: label-out-of-range
loader = DataLoader(TensorDataset(feats, grades), batch_size=20, shuffle=True)
net = nn.Linear(6, 3)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
dev = torch.device("cpu")
for xb, yb in loader:
    yb = yb.to(dev)
    loss = nn.functional.cross_entropy(net(xb), yb)  # expect-related: label-out-of-range
    opt.zero_grad()
    loss.backward()
    opt.step()
