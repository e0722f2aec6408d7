# A GAN whose discriminator steps before the generator's backward through its output.
import torch
from torch import nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4)
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4)
bce = nn.BCEWithLogitsLoss()
for step in range(5):
    real = torch.randn(16, 8)
    fake = G(torch.randn(16, 4))
    d_fake = D(fake)
    d_loss = bce(D(real), torch.ones(16, 1)) + bce(d_fake, torch.zeros(16, 1))
    opt_d.zero_grad()
    d_loss.backward(retain_graph=True)
    opt_d.step()  # expect: inplace-modified
    g_loss = bce(d_fake, torch.ones(16, 1))
    opt_g.zero_grad()
    g_loss.backward()  # expect-related: inplace-modified
    opt_g.step()
