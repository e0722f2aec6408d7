# (review script) written to the doctor's spec; expected: none
# Metric learning with an ArcFace head (additive angular margin, s=30, m=0.5), the
# standard recipe for face/speaker embeddings: cos(theta + m) for the true class, times s,
# then cross_entropy. Its first loss is far above ln C by construction.
import math

import torch
import torch.nn.functional as F
from torch import nn


class ArcMarginProduct(nn.Module):
    def __init__(self, in_features, out_features, s=30.0, m=0.50):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        nn.init.xavier_uniform_(self.weight)
        self.s, self.m = s, m
        self.cos_m, self.sin_m = math.cos(m), math.sin(m)
        self.th, self.mm = math.cos(math.pi - m), math.sin(math.pi - m) * m

    def forward(self, emb, label):
        cosine = F.linear(F.normalize(emb), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - cosine.pow(2)).clamp(0, 1))
        phi = cosine * self.cos_m - sine * self.sin_m
        phi = torch.where(cosine > self.th, phi, cosine - self.mm)
        one_hot = F.one_hot(label, cosine.size(1)).float()
        return self.s * (one_hot * phi + (1.0 - one_hot) * cosine)


torch.manual_seed(0)
ids, d = 20, 32
centers = torch.randn(ids, d)
y = torch.randint(0, ids, (2000,))
x = centers[y] + 0.7 * torch.randn(2000, d)
backbone = nn.Sequential(nn.Linear(d, 128), nn.BatchNorm1d(128), nn.PReLU(), nn.Linear(128, 64))
head = ArcMarginProduct(64, ids)
optimizer = torch.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.1, momentum=0.9)
for epoch in range(4):
    for i in range(0, 2000, 100):
        logits = head(backbone(x[i : i + 100]), y[i : i + 100])
        loss = F.cross_entropy(logits, y[i : i + 100])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} arcface loss {loss.item():.3f}")
