"""A custom metric in a step: top-5 accuracy, next to top-1, on 20 overlapping classes.

    cd examples/tasks && trainwell train --config topk.yaml
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset


def make_data(n: int = 4096, classes: int = 20, features: int = 16, noise: float = 1.2):
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(classes, features, generator=g)
    y = torch.randint(classes, (n,), generator=g)
    x = centers[y] + noise * torch.randn(n, features, generator=g)  # clusters that overlap
    split = n * 3 // 4
    return TensorDataset(x[:split], y[:split]), TensorDataset(x[split:], y[split:])


def make_model(num_classes: int, features: int = 16, hidden: int = 64) -> nn.Module:
    # num_classes is filled in from the data (the training set's targets).
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


def topk_accuracy(logits, y, k):
    return (logits.topk(k, dim=1).indices == y[:, None]).any(dim=1).float().mean()


def step(model, batch):
    x, y = batch
    logits = model(x)
    return {
        "loss": F.cross_entropy(logits, y),
        "top1": topk_accuracy(logits, y, 1),
        "top5": topk_accuracy(logits, y, 5),
    }
