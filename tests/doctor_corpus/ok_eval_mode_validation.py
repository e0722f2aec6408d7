# Validation switches the model to eval mode and back to train mode afterwards.
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
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in val_dl:
            logits = model(xb)
            correct += (logits.argmax(1) == yb).sum().item()
    model.train()
    return correct / 180


for epoch in range(3):
    for xb, yb in train_dl:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f} val acc {validate():.3f}")
