# EXPECT: none
# BYOL: online network (encoder + projector + predictor) and a target network updated
# by EMA; the target sees both augmented views under no_grad, in train mode (BYOL's
# target uses batch statistics in its batch norms, as the paper does).
import copy
import torch
from torch import nn
import torch.nn.functional as F


def mlp(dim, hidden, out):
    return nn.Sequential(nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, out))


class BYOL(nn.Module):
    def __init__(self):
        super().__init__()
        self.online_encoder = nn.Sequential(mlp(32, 64, 32), mlp(32, 64, 16))
        self.online_predictor = mlp(16, 64, 16)
        self.target_encoder = copy.deepcopy(self.online_encoder)
        for p in self.target_encoder.parameters():
            p.requires_grad = False

    @torch.no_grad()
    def update_target(self, tau=0.99):
        for pt, po in zip(self.target_encoder.parameters(), self.online_encoder.parameters()):
            pt.mul_(tau).add_(po, alpha=1 - tau)


def loss_fn(p, z):
    return 2 - 2 * F.cosine_similarity(p, z.detach(), dim=-1).mean()


def augment(x):
    return x * (1 + 0.2 * torch.randn_like(x)) + 0.1 * torch.randn_like(x)


torch.manual_seed(0)
byol = BYOL()
params = list(byol.online_encoder.parameters()) + list(byol.online_predictor.parameters())
optimizer = torch.optim.Adam(params, lr=1e-3)
images = torch.randn(512, 32)
for step in range(30):
    x = images[torch.randint(0, 512, (64,))]
    v1, v2 = augment(x), augment(x)
    p1 = byol.online_predictor(byol.online_encoder(v1))
    p2 = byol.online_predictor(byol.online_encoder(v2))
    with torch.no_grad():
        z1 = byol.target_encoder(v1)
        z2 = byol.target_encoder(v2)
    loss = loss_fn(p1, z2) + loss_fn(p2, z1)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    byol.update_target()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}")
