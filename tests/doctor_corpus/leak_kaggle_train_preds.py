# Kaggle-style train_fn that keeps the raw outputs of every batch for an epoch-level
# training metric: the outputs still carry their graphs.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(384, 12)
Y = (X[:, 0] > 0).float()
loader = DataLoader(TensorDataset(X, Y), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.BCEWithLogitsLoss()


def train_fn():
    model.train()
    preds, targets, running = [], [], 0.0
    for inputs, labels in loader:
        optimizer.zero_grad()
        outputs = model(inputs).view(-1)  # expect-related: graph-retained
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        running += loss.item()
        preds.append(outputs)  # expect: graph-retained
        targets.append(labels)
    preds = torch.cat(preds).detach()
    acc = ((preds > 0).float() == torch.cat(targets)).float().mean().item()
    return running / len(loader), acc


for epoch in range(2):
    print(epoch, train_fn())
