# Kaggle-style fold loop: train_fn / valid_fn, out-of-fold predictions gathered with
# sigmoid().cpu() under no_grad, the best score tracked as a float, the best model
# saved to a buffer, ReduceLROnPlateau stepped per epoch.
import io

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(480, 12)
Y = ((X[:, 0] + X[:, 3]) > 0).float()
folds = torch.arange(480) % 3


def auc_like(preds, targets):
    return ((preds > 0.5).float() == targets).float().mean().item()


def train_fn(loader, model, criterion, optimizer):
    model.train()
    losses = []
    for inputs, targets in loader:
        optimizer.zero_grad()
        outputs = model(inputs).view(-1)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


def valid_fn(loader, model, criterion):
    model.eval()
    preds, valid_loss = [], 0.0
    for inputs, targets in loader:
        with torch.no_grad():
            outputs = model(inputs).view(-1)
            valid_loss += criterion(outputs, targets).item()
        preds.append(outputs.sigmoid().cpu())
    return valid_loss / len(loader), torch.cat(preds)


oof = torch.zeros(len(X))
for fold in range(3):
    trn, val = folds != fold, folds == fold
    train_loader = DataLoader(TensorDataset(X[trn], Y[trn]), batch_size=32, shuffle=True)
    valid_loader = DataLoader(TensorDataset(X[val], Y[val]), batch_size=64)
    model = nn.Sequential(nn.Linear(12, 24), nn.SiLU(), nn.Dropout(0.2), nn.Linear(24, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", patience=1)
    criterion = nn.BCEWithLogitsLoss()
    best_score, best_buffer = 0.0, io.BytesIO()
    for epoch in range(2):
        train_loss = train_fn(train_loader, model, criterion, optimizer)
        val_loss, preds = valid_fn(valid_loader, model, criterion)
        scheduler.step(val_loss)
        score = auc_like(preds, Y[val])
        if score > best_score:
            best_score, best_buffer = score, io.BytesIO()
            torch.save(model.state_dict(), best_buffer)
            oof[val] = preds
    print(f"fold {fold}: best {best_score:.3f}")
print("oof acc", auc_like(oof, Y))
