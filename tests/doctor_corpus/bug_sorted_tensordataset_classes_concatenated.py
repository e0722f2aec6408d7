# A tabular classifier whose training tensors are built class by class (all the 0s,
# then the 1s, then the 2s) and fed in that order: shuffle was left at its default.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
centers = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]])
xs, ys = [], []
for label, center in enumerate(centers):
    xs.append(center + 0.7 * torch.randn(200, 3))
    ys.append(torch.full((200,), label))
x_train, y_train = torch.cat(xs), torch.cat(ys)
x_val = centers.repeat(20, 1) + 0.7 * torch.randn(60, 3)
y_val = torch.arange(3).repeat(20)

train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=32)  # expect: sorted-labels-no-shuffle
val_loader = DataLoader(TensorDataset(x_val, y_val), batch_size=32)
model = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

for epoch in range(3):
    model.train()
    for xb, yb in train_loader:  # expect-related: sorted-labels-no-shuffle
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader)
    print(f"epoch {epoch}: val acc {correct / len(x_val):.3f}")
