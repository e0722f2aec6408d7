# The spectrograms are decoded once up front into tensors; the DataLoader then only
# slices a TensorDataset, and the training steps are not waiting on data.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def decode_all(n):
    labels = torch.arange(n) % 3
    specs = torch.randn(n, 32) + labels.unsqueeze(1)
    return specs * (0.9 + 0.2 * torch.rand(n, 1)), labels


torch.manual_seed(0)
specs, labels = decode_all(672)
loader = DataLoader(TensorDataset(specs, labels), batch_size=16, shuffle=True)
model = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step, (spec, label) in enumerate(loader):
    loss = nn.functional.cross_entropy(model(spec), label)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 14 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
