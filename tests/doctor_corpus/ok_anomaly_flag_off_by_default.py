# A GAN script with a --detect-anomaly debug flag, off by default: the mode is set
# from the flag (False), as argparse-driven research code does.
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--detect-anomaly", action="store_true")
args = parser.parse_args()
torch.autograd.set_detect_anomaly(args.detect_anomaly)

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
D = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
for it in range(40):
    real = torch.randn(64, 2) * 0.5 + torch.tensor([2.0, -1.0])
    fake = G(torch.randn(64, 8))
    opt_d.zero_grad()
    loss_d = bce(D(real), torch.ones(64, 1)) + bce(D(fake.detach()), torch.zeros(64, 1))
    loss_d.backward()
    opt_d.step()
    opt_g.zero_grad()
    loss_g = bce(D(fake), torch.ones(64, 1))
    loss_g.backward()
    opt_g.step()
    if it % 10 == 0:
        print(f"it {it}: D {loss_d.item():.3f} G {loss_g.item():.3f}")
torch.autograd.set_detect_anomaly(False)
