# An encoder-decoder where the encoder's output is detached inside forward (left over
# from a "freeze the encoder" experiment): the encoder's parameters are in the
# optimizer but no gradient reaches them.
import torch
from torch import nn


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(24, 12), nn.Tanh(), nn.Linear(12, 4))
        self.decoder = nn.Sequential(nn.Linear(4, 12), nn.Tanh(), nn.Linear(12, 24))

    def forward(self, x):
        z = self.encoder(x).detach()  # expect: param-without-grad
        return self.decoder(z)


torch.manual_seed(0)
basis = torch.randn(4, 24)
data = torch.randn(600, 4) @ basis
model = AutoEncoder()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    for batch in data.split(50):
        recon = model(batch)
        loss = nn.functional.mse_loss(recon, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: reconstruction mse {loss.item():.4f}")
