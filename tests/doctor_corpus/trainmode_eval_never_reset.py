# evaluate() switches the model to eval mode, and nothing switches it back: from the
# second epoch on, training runs without dropout and with frozen batch-norm statistics.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.bn = nn.BatchNorm1d(64)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(64, 3)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.bn(self.fc1(x)))))


def train_epoch(model, loader, optimizer):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)  # expect-related: eval-mode-in-train
        loss.backward()
        optimizer.step()
    return loss.item()


def evaluate(model, loader):
    model.eval()  # expect: eval-mode-in-train
    with torch.no_grad():
        hits = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in loader)
    return hits / len(loader.dataset)


torch.manual_seed(0)
x = torch.randn(600, 16)
y = torch.bucketize(x[:, :3].sum(1), torch.tensor([-1.0, 1.0]))
train_loader = DataLoader(TensorDataset(x[:480], y[:480]), batch_size=32, shuffle=True)
val_loader = DataLoader(TensorDataset(x[480:], y[480:]), batch_size=60)
model = Net()
model.train()
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
for epoch in range(3):
    loss = train_epoch(model, train_loader, optimizer)
    print(f"epoch {epoch}: loss {loss:.4f} val acc {evaluate(model, val_loader):.3f}")
