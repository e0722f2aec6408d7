# Transfer learning: the optimizer is created for the pretrained encoder, then the
# classifier for our 5 classes is appended to the model; the optimizer never sees it.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def pretrained_encoder():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())


model = pretrained_encoder()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)  # expect: param-not-in-optimizer
model.append(nn.Linear(64, 5))

torch.manual_seed(1)
x = torch.randn(800, 32)
y = x[:, :5].argmax(1)
loader = DataLoader(TensorDataset(x, y), batch_size=40, shuffle=True)
for epoch in range(2):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
