# (review script) written to the doctor's spec; expected: none
# A DCGAN-style loop on 2-D points: D ends in a Sigmoid and is trained with nn.BCELoss;
# both networks go through one small `update` helper, so there is a single backward line.
import torch
import torch.nn as nn

torch.manual_seed(0)
nz = 4
netG = nn.Sequential(nn.Linear(nz, 32), nn.ReLU(), nn.Linear(32, 2))
netD = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1), nn.Sigmoid())
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
real_label, fake_label = 1.0, 0.0


def update(optimizer, loss):
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def real_batch(n):
    angle = torch.rand(n) * 6.2832
    return torch.stack([angle.cos(), angle.sin()], 1) * 2 + 0.05 * torch.randn(n, 2)


for it in range(300):
    real = real_batch(64)
    b_size = real.size(0)
    label = torch.full((b_size,), real_label)
    fake_labels = torch.full((b_size,), fake_label)
    noise = torch.randn(b_size, nz)
    fake = netG(noise)
    errD_real = criterion(netD(real).view(-1), label)
    errD_fake = criterion(netD(fake.detach()).view(-1), fake_labels)
    errD = update(optimizerD, errD_real + errD_fake)
    errG = update(optimizerG, criterion(netD(fake).view(-1), label))
    if it % 100 == 0:
        print(f"[{it}] Loss_D: {errD:.4f} Loss_G: {errG:.4f}")
