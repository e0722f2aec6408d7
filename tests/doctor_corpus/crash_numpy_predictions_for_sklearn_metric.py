# Validation metrics computed with NumPy on the model's raw output, outside no_grad:
# the probabilities still require grad, and .numpy() refuses them.
import numpy as np
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(400, 5)
y = (x[:, 0] - x[:, 2] > 0).float()
model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
loss_fn = nn.BCEWithLogitsLoss()


def roc_auc(scores, labels):
    order = np.argsort(-scores)
    labels = labels[order]
    tp, fp = np.cumsum(labels), np.cumsum(1 - labels)
    return np.trapz(tp / tp[-1], fp / fp[-1])


for epoch in range(3):
    for i in range(0, 320, 32):
        optimizer.zero_grad()
        loss = loss_fn(model(x[i : i + 32]).squeeze(1), y[i : i + 32])
        loss.backward()
        optimizer.step()
    probs = torch.sigmoid(model(x[320:])).squeeze(1)
    auc = roc_auc(probs.numpy(), y[320:].numpy())  # expect: numpy-on-grad-tensor
    print(f"epoch {epoch}: val auc {auc:.3f}")
