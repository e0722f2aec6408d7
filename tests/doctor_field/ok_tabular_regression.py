# Field corpus: a tabular regression in the style of many blog posts and Kaggle notebooks
# (a pandas-free California-housing stand-in: standardize with train statistics, an MLP,
# MSELoss with the target kept (N, 1), Adam, early stopping on validation loss with the
# best state_dict kept, a final test RMSE).
# source: pattern of https://machinelearningmastery.com/building-a-regression-model-in-pytorch/
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

rng = np.random.default_rng(42)
X = rng.normal(size=(600, 8)).astype(np.float32)
y = (X @ rng.normal(size=8) + 0.1 * rng.normal(size=600)).astype(np.float32)
X_train, X_test = X[:480], X[480:]
y_train, y_test = y[:480], y[480:]
mean, std = X_train.mean(0), X_train.std(0)
X_train = torch.tensor((X_train - mean) / std)
X_test = torch.tensor((X_test - mean) / std)
y_train = torch.tensor(y_train).reshape(-1, 1)
y_test = torch.tensor(y_test).reshape(-1, 1)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 24), nn.ReLU(), nn.Linear(24, 12), nn.ReLU(), nn.Linear(12, 1))
loss_fn = nn.MSELoss()
optimizer = optim.Adam(model.parameters(), lr=0.005)

n_epochs = 20
batch_size = 64
batch_start = torch.arange(0, len(X_train), batch_size)
best_mse = np.inf
best_weights = None
history = []
patience, bad = 5, 0
for epoch in range(n_epochs):
    model.train()
    for start in batch_start:
        X_batch = X_train[start : start + batch_size]
        y_batch = y_train[start : start + batch_size]
        y_pred = model(X_batch)
        loss = loss_fn(y_pred, y_batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        y_pred = model(X_test)
        mse = float(loss_fn(y_pred, y_test))
    history.append(mse)
    if mse < best_mse:
        best_mse, bad = mse, 0
        best_weights = copy.deepcopy(model.state_dict())
    else:
        bad += 1
        if bad >= patience:
            break
model.load_state_dict(best_weights)
print(f"MSE: {best_mse:.4f}  RMSE: {np.sqrt(best_mse):.4f}")
