# EXPECT: none
# WGAN-GP: five critic steps per generator step, a gradient penalty computed with
# torch.autograd.grad(create_graph=True) on interpolates, Adam(0., 0.9) as in the paper.
import torch
from torch import nn, autograd

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
C = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.9))
opt_c = torch.optim.Adam(C.parameters(), lr=1e-4, betas=(0.0, 0.9))
n_critic, lambda_gp, bs = 5, 10.0, 64


def sample_real(n):
    return torch.randn(n, 2) * 0.2 + torch.tensor([[1.0, -1.0]])


def gradient_penalty(critic, real, fake):
    alpha = torch.rand(real.size(0), 1)
    interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    out = critic(interpolates)
    grads = autograd.grad(outputs=out, inputs=interpolates, grad_outputs=torch.ones_like(out),
                          create_graph=True, retain_graph=True, only_inputs=True)[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


for it in range(20):
    for _ in range(n_critic):
        real = sample_real(bs)
        with torch.no_grad():
            fake = G(torch.randn(bs, 4))
        opt_c.zero_grad()
        c_loss = C(fake).mean() - C(real).mean() + lambda_gp * gradient_penalty(C, real, fake)
        c_loss.backward()
        opt_c.step()
    for p in C.parameters():
        p.requires_grad_(False)
    opt_g.zero_grad()
    g_loss = -C(G(torch.randn(bs, 4))).mean()
    g_loss.backward()
    opt_g.step()
    for p in C.parameters():
        p.requires_grad_(True)
    if it % 5 == 0:
        print(f"it {it} critic {c_loss.item():.4f} gen {g_loss.item():.4f}")
