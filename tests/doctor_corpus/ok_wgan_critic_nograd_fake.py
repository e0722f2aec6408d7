# WGAN-style training: for each critic update the generator's samples are drawn under
# no_grad while the generator stays in train mode (its batch norm normalises with batch
# statistics, as it does in the generator step); the generator is updated every
# n_critic steps.
import torch
from torch import nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))
D = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
opt_g = torch.optim.RMSprop(G.parameters(), lr=5e-4)
opt_d = torch.optim.RMSprop(D.parameters(), lr=5e-4)
n_critic, clip = 3, 0.05


def real_batch(n=64):
    angle = torch.rand(n) * 6.2832
    return torch.stack([angle.cos(), angle.sin()], 1) + 0.05 * torch.randn(n, 2)


for it in range(20):
    for _ in range(n_critic):
        with torch.no_grad():
            fake = G(torch.randn(64, 8))
        d_loss = D(fake).mean() - D(real_batch()).mean()
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        for p in D.parameters():
            p.data.clamp_(-clip, clip)
    g_loss = -D(G(torch.randn(64, 8))).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    if it % 5 == 0:
        print(f"iter {it}: critic {d_loss.item():.4f} generator {g_loss.item():.4f}")
