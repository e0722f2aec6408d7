# The loss is summed over the batch (reduction="sum") and divided by the dataset size
# for reporting; the first loss is about batch_size * ln(C), as it should be.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(512, 16)
y = x[:, :4].argmax(1)
loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
criterion = nn.CrossEntropyLoss(reduction="sum")
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
for epoch in range(3):
    total = 0.0
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        total += loss.item()
    print(f"epoch {epoch}: mean loss {total / len(loader.dataset):.3f}")
