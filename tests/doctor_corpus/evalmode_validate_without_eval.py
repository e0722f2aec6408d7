# Validation runs under no_grad but the model is never switched to eval mode: dropout
# keeps dropping units and batch norm normalises with (and updates its running
# statistics from) each validation batch.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(900, 20)
y = (x[:, :6].sum(1) > 0).long()
train_dl = DataLoader(TensorDataset(x[:720], y[:720]), batch_size=48, shuffle=True)
val_dl = DataLoader(TensorDataset(x[720:], y[720:]), batch_size=60)

model = nn.Sequential(
    nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 2)
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()


def validate():
    correct = 0
    with torch.no_grad():
        for xb, yb in val_dl:
            logits = model(xb)  # expect: train-mode-in-eval
            correct += (logits.argmax(1) == yb).sum().item()
    return correct / 180


for epoch in range(3):
    model.train()
    for xb, yb in train_dl:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f} val acc {validate():.3f}")
