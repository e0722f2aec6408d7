# A small VAE whose every backward runs inside detect_anomaly(), added while chasing a
# NaN in the KL term and kept "just in case": as slow as leaving the mode on.
import torch
import torch.nn.functional as F
from torch import nn


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(16, 2 * 4)
        self.dec = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 16))

    def forward(self, x):
        mu, log_var = self.enc(x).chunk(2, dim=1)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * log_var)
        return self.dec(z), mu, log_var


torch.manual_seed(0)
data = torch.sigmoid(torch.randn(480, 16))
model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for i in range(0, 480, 32):
        x = data[i : i + 32]
        recon, mu, log_var = model(x)
        rec = F.binary_cross_entropy_with_logits(recon, x, reduction="sum")
        kld = -0.5 * torch.sum(1 + log_var - mu.pow(2) - log_var.exp())
        loss = (rec + kld) / len(x)
        optimizer.zero_grad()
        with torch.autograd.detect_anomaly():  # expect: anomaly-mode-on
            loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
