# Metric learning with an in-batch contrastive loss on Euclidean distances. The distance
# matrix includes each embedding's distance to itself: exactly 0, where sqrt has no
# finite derivative, so the loss is finite but the gradients are NaN.
import torch
from torch import nn


def pairwise_distances(emb):
    diff = emb.unsqueeze(1) - emb.unsqueeze(0)
    return torch.sqrt((diff**2).sum(-1))  # expect: nonfinite-grad


def contrastive_loss(emb, labels, margin=1.0):
    d = pairwise_distances(emb)
    same = (labels.unsqueeze(1) == labels.unsqueeze(0)).float()
    pos = same * d**2
    neg = (1 - same) * torch.relu(margin - d) ** 2
    return (pos + neg).mean()


torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8))
optimizer = torch.optim.SGD(encoder.parameters(), lr=0.05, momentum=0.9)
prototypes = torch.randn(5, 16)
for step in range(30):
    labels = torch.randint(0, 5, (32,))
    x = prototypes[labels] + 0.5 * torch.randn(32, 16)
    loss = contrastive_loss(encoder(x), labels)
    optimizer.zero_grad()
    loss.backward()  # expect-related: nonfinite-grad
    optimizer.step()
    if step % 10 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
