"""Multi-label classification: several independent yes/no labels per sample, rare positives.

    cd examples/tasks && trainwell train --config multilabel.yaml
    cd examples/tasks && trainwell train --config multilabel.yaml train.step=multilabel:step
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

RATES = [0.1, 0.15, 0.2, 0.25, 0.3, 0.1]  # share of positives of each label
POS_WEIGHT = [9.0, 5.7, 4.0, 3.0, 2.3, 9.0]  # negatives / positives, as in multilabel.yaml


def make_data(n: int = 3072, features: int = 16):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, len(RATES), generator=g)
    z = (x @ w) / w.norm(dim=0)  # one standard normal score per label
    thresholds = torch.distributions.Normal(0.0, 1.0).icdf(1 - torch.tensor(RATES))
    y = (z > thresholds).float()  # (N, labels) of 0/1, float as BCE wants
    split = n * 3 // 4
    return TensorDataset(x[:split], y[:split]), TensorDataset(x[split:], y[split:])


def make_model(features: int = 16, labels: int = len(RATES), hidden: int = 64) -> nn.Module:
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, labels))


def step(model, batch):
    x, y = batch
    logits = model(x)
    pos_weight = torch.tensor(POS_WEIGHT, device=logits.device)
    loss = F.binary_cross_entropy_with_logits(logits, y, pos_weight=pos_weight)
    pred = (logits > 0).float()
    # Per-sample F1 (sklearn's average="samples"): a mean over samples, so the engine's
    # sample-weighted average over batches is exact. A sample with no label and no
    # prediction scores 1.
    hits = (pred * y).sum(dim=1)
    f1 = torch.where(pred.sum(1) + y.sum(1) > 0, 2 * hits / (pred.sum(1) + y.sum(1)), 1.0)
    exact = (pred == y).all(dim=1).float()
    return {"loss": loss, "f1": f1.mean(), "exact_match": exact.mean()}
