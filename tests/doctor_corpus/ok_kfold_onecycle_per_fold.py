# (review script) expected: none
# common Kaggle/sklearn-style k-fold CV: fresh model, optimizer and OneCycleLR scheduler per fold,
# early-stopping on validation loss, best state_dict kept via copy.deepcopy
import copy
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Subset, TensorDataset


def kfold_indices(n, k, seed):
    rng = np.random.RandomState(seed)
    idx = rng.permutation(n)
    folds = np.array_split(idx, k)
    for i in range(k):
        val = folds[i]
        tr = np.concatenate([folds[j] for j in range(k) if j != i])
        yield tr, val


class MLP(nn.Module):
    def __init__(self, d_in, n_classes):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(64, n_classes))

    def forward(self, x):
        return self.net(x)


def train_epoch(model, loader, criterion, optimizer, scheduler):
    model.train()
    running = 0.0
    for xb, yb in loader:
        optimizer.zero_grad()
        out = model(xb)
        loss = criterion(out, yb)
        loss.backward()
        optimizer.step()
        scheduler.step()
        running += loss.item() * xb.size(0)
    return running / len(loader.dataset)


def valid_epoch(model, loader, criterion):
    model.eval()
    total, correct, running = 0, 0, 0.0
    with torch.no_grad():
        for xb, yb in loader:
            out = model(xb)
            running += criterion(out, yb).item() * xb.size(0)
            correct += (out.argmax(1) == yb).sum().item()
            total += xb.size(0)
    return running / total, correct / total


def main():
    torch.manual_seed(42)
    g = torch.Generator().manual_seed(0)
    N, D, C = 600, 20, 3
    W = torch.randn(D, C, generator=g)
    X = torch.randn(N, D, generator=g)
    y = (X @ W + 0.5 * torch.randn(N, C, generator=g)).argmax(1)
    dataset = TensorDataset(X, y)
    criterion = nn.CrossEntropyLoss()
    k = 5
    epochs = 4
    fold_scores = []
    for fold, (tr_idx, va_idx) in enumerate(kfold_indices(N, k, 42)):
        train_loader = DataLoader(Subset(dataset, tr_idx), batch_size=32, shuffle=True)
        val_loader = DataLoader(Subset(dataset, va_idx), batch_size=64)
        model = MLP(D, C)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, epochs=epochs,
                                                        steps_per_epoch=len(train_loader))
        best_loss, best_state = float("inf"), None
        for epoch in range(epochs):
            tr_loss = train_epoch(model, train_loader, criterion, optimizer, scheduler)
            va_loss, va_acc = valid_epoch(model, val_loader, criterion)
            if va_loss < best_loss:
                best_loss = va_loss
                best_state = copy.deepcopy(model.state_dict())
            print(f"fold {fold} epoch {epoch}: train {tr_loss:.4f} val {va_loss:.4f} acc {va_acc:.3f}")
        model.load_state_dict(best_state)
        _, acc = valid_epoch(model, val_loader, criterion)
        fold_scores.append(acc)
    print(f"CV accuracy: {np.mean(fold_scores):.4f} +- {np.std(fold_scores):.4f}")


if __name__ == "__main__":
    main()
