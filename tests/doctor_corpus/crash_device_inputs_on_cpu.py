# The model is moved to the accelerator by a helper, but the batches from the DataLoader
# are never moved: the first forward mixes devices and raises.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def accelerator():
    # the machine's accelerator; the meta device stands in for one on CPU-only machines
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("meta")


def build_model(device):
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 2))
    return model.to(device)


torch.manual_seed(0)
device = accelerator()
model = build_model(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(256, 12)
y = (x[:, 0] > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
for epoch in range(2):
    for xb, yb in loader:
        out = model(xb)  # expect: device-mismatch
        loss = nn.functional.cross_entropy(out, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
