# The PyTorch DCGAN tutorial's loop, tiny: every few iterations the generator draws
# samples from a fixed noise under no_grad for a picture, in train mode as the tutorial
# does (a generator's batch norm is never switched to eval there): not an evaluation.
import torch
import torch.nn as nn

torch.manual_seed(0)
nz = 8
netG = nn.Sequential(nn.Linear(nz, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh())
netD = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1), nn.Sigmoid())
criterion = nn.BCELoss()
fixed_noise = torch.randn(16, nz)
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
img_list = []
data = torch.randn(640, 16).tanh()
iters = 0
for epoch in range(2):
    for i in range(0, len(data), 32):
        real = data[i:i + 32]
        b_size = real.size(0)
        netD.zero_grad()
        label = torch.full((b_size,), 1.0)
        errD_real = criterion(netD(real).view(-1), label)
        errD_real.backward()
        noise = torch.randn(b_size, nz)
        fake = netG(noise)
        label.fill_(0.0)
        errD_fake = criterion(netD(fake.detach()).view(-1), label)
        errD_fake.backward()
        optimizerD.step()
        netG.zero_grad()
        label.fill_(1.0)
        errG = criterion(netD(fake).view(-1), label)
        errG.backward()
        optimizerG.step()
        if iters % 5 == 0:
            with torch.no_grad():
                sample = netG(fixed_noise).detach().cpu()
            img_list.append(sample)
        iters += 1
