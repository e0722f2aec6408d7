# A GAN that saves each network's state_dict on its own, and a grid of samples as a
# tensor: nothing pickled but tensors.
import os
import tempfile

import torch
from torch import nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
D = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
fixed_noise = torch.randn(16, 4)
out = tempfile.mkdtemp()

for step in range(30):
    real = torch.randn(32, 2) + 3
    fake = G(torch.randn(32, 4))
    opt_d.zero_grad()
    d_loss = bce(D(real), torch.ones(32, 1)) + bce(D(fake.detach()), torch.zeros(32, 1))
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    g_loss = bce(D(fake), torch.ones(32, 1))
    g_loss.backward()
    opt_g.step()
    if step % 10 == 9:
        torch.save(G.state_dict(), os.path.join(out, f"G_{step}.pt"))
        torch.save(D.state_dict(), os.path.join(out, f"D_{step}.pt"))
        with torch.no_grad():
            torch.save(G(fixed_noise), os.path.join(out, f"samples_{step}.pt"))
        print(f"step {step}: D {d_loss.item():.3f} G {g_loss.item():.3f}")
