# A DCGAN-style script whose checkpoint helper is handed a dict holding the networks
# themselves (and the optimizers' state): the modules are pickled whole.
import os
import tempfile

import torch
from torch import nn


def save_checkpoint(state, folder, epoch):
    path = os.path.join(folder, f"ckpt_{epoch:03d}.pth")
    torch.save(state, path)  # expect: save-whole-model
    return path


torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.Tanh())
netD = nn.Sequential(nn.Linear(32, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
criterion = nn.BCEWithLogitsLoss()
folder = tempfile.mkdtemp()

for epoch in range(3):
    for _ in range(8):
        real = torch.tanh(torch.randn(32, 32))
        fake = netG(torch.randn(32, 16))
        optD.zero_grad()
        errD = criterion(netD(real), torch.ones(32, 1)) + criterion(
            netD(fake.detach()), torch.zeros(32, 1)
        )
        errD.backward()
        optD.step()
        optG.zero_grad()
        errG = criterion(netD(fake), torch.ones(32, 1))
        errG.backward()
        optG.step()
    save_checkpoint(  # expect-related: save-whole-model
        {"epoch": epoch, "netG": netG, "netD": netD,
         "optG": optG.state_dict(), "optD": optD.state_dict()},
        folder, epoch,
    )
    print(f"epoch {epoch}: loss_D {errD.item():.3f} loss_G {errG.item():.3f}")
