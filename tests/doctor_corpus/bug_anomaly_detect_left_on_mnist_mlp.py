# Anomaly detection switched on at the top while hunting a NaN weeks ago, and never
# switched off: every forward records tracebacks, every backward checks for NaN.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.autograd.set_detect_anomaly(True)  # expect: anomaly-mode-on
torch.manual_seed(0)
pixels = torch.rand(600, 28 * 28)
digits = torch.randint(0, 10, (600,))
loader = DataLoader(TensorDataset(pixels, digits), batch_size=50, shuffle=True)
model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(2):
    for batch, (x, y) in enumerate(loader):
        pred = model(x)
        loss = loss_fn(pred, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if batch % 6 == 0:
            print(f"epoch {epoch} batch {batch}: loss {loss.item():>7f}")
