# The encoder is frozen with requires_grad=False but the optimizer is still built from
# model.parameters(), as many fine-tuning scripts do: the frozen parameters never get
# a gradient, and the optimizer skips them.
import torch
from torch import nn


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(24, 12), nn.Tanh(), nn.Linear(12, 4))
        self.decoder = nn.Sequential(nn.Linear(4, 12), nn.Tanh(), nn.Linear(12, 24))

    def forward(self, x):
        return self.decoder(self.encoder(x))


torch.manual_seed(0)
basis = torch.randn(4, 24)
data = torch.randn(600, 4) @ basis
model = AutoEncoder()
for p in model.encoder.parameters():
    p.requires_grad = False
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    for batch in data.split(50):
        recon = model(batch)
        loss = nn.functional.mse_loss(recon, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: reconstruction mse {loss.item():.4f}")
