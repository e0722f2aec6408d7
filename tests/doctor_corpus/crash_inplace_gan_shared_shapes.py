# A 1-D GAN whose generator ends in Linear(16, 1) and whose discriminator starts with
# Linear(1, 16): the weights have the same shape, transposed. The discriminator's step
# runs before the generator's backward through D(fake).
import torch
from torch import nn

torch.manual_seed(0)
gen = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
disc = nn.Sequential(nn.Linear(1, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
opt_gen = torch.optim.Adam(gen.parameters(), lr=2e-4)
opt_disc = torch.optim.Adam(disc.parameters(), lr=2e-4)
criterion = nn.BCEWithLogitsLoss()


def train_step(real):
    fake = gen(torch.randn(len(real), 2))
    loss_gen = criterion(disc(fake), torch.ones(len(real), 1))
    loss_disc = criterion(disc(real), torch.ones(len(real), 1)) + criterion(
        disc(fake.detach()), torch.zeros(len(real), 1)
    )
    opt_disc.zero_grad()
    loss_disc.backward()
    opt_disc.step()  # expect: inplace-modified
    opt_gen.zero_grad()
    loss_gen.backward()  # expect-related: inplace-modified
    opt_gen.step()


for it in range(20):
    train_step(1.5 + 0.3 * torch.randn(64, 1))
