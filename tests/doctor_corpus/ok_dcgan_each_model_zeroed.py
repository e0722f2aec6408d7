# pytorch/examples dcgan/main.py's update, cut down in size (MLP nets on 8x8 images),
# as published: netD.zero_grad() before the discriminator's update, netG.zero_grad()
# before the generator's.
import torch
import torch.nn as nn
import torch.optim as optim

nz, ngf, ndf = 8, 32, 32
torch.manual_seed(999)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(nz, ngf), nn.BatchNorm1d(ngf), nn.ReLU(True),
                                  nn.Linear(ngf, 64), nn.Tanh())

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(64, ndf), nn.LeakyReLU(0.2, inplace=True),
                                  nn.Linear(ndf, 1), nn.Sigmoid())

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


netG = Generator()
netD = Discriminator()
criterion = nn.BCELoss()
fixed_noise = torch.randn(16, nz)
real_label, fake_label = 1, 0
optimizerD = optim.Adam(netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))
dataset = torch.rand(320, 64) * 2 - 1

for epoch in range(2):
    for i in range(0, 320, 32):
        ############################
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        ###########################
        netD.zero_grad()
        real_cpu = dataset[i:i + 32]
        batch_size = real_cpu.size(0)
        label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype)
        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()

        noise = torch.randn(batch_size, nz)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()

        ############################
        # (2) Update G network: maximize log(D(G(z)))
        ###########################
        netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        optimizerG.step()
        print(f"[{epoch}][{i}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f} "
              f"D(x): {D_x:.4f} D(G(z)): {D_G_z1:.4f} / {D_G_z2:.4f}")
