# Multiple-instance learning: a bag's probability is the masked mean of its instances'
# probabilities, with the count clamped to at least 1 so an empty bag gives 0. Correct.
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
scorer = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.Adam(scorer.parameters(), lr=1e-3)
bags = torch.randn(64, 6, 10)
valid = torch.rand(64, 6) > 0.3
valid[5] = False  # an empty bag
labels = (bags[:, :, 0].amax(1) > 1).float()


def train_step(x, mask, y):
    inst = torch.sigmoid(scorer(x)).squeeze(-1)
    bag_p = (inst * mask).sum(1) / mask.sum(1).clamp(min=1)
    loss = F.binary_cross_entropy(bag_p, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


for epoch in range(3):
    for i in range(0, 64, 16):
        train_step(bags[i:i + 16], valid[i:i + 16].float(), labels[i:i + 16])
