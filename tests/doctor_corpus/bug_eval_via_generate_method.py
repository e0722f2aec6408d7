# EXPECT: eval-mode-in-train@35  (related: eval-mode-in-train@32)
# A denoising autoencoder validated through its reconstruct() method (which calls the
# encoder and decoder directly) after model.eval() at the end of each epoch; the loop
# never calls model.train() again, so epochs 2+ train with dropout off.
import torch
from torch import nn


class DenoisingAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 8))
        self.decoder = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 32))

    def forward(self, x):
        return self.decoder(self.encoder(x + 0.2 * torch.randn_like(x)))

    def reconstruct(self, x):
        return self.decoder(self.encoder(x))


torch.manual_seed(0)
data = torch.randn(512, 32) @ torch.randn(32, 32) * 0.3
val = torch.randn(128, 32) @ torch.randn(32, 32) * 0.3
model = DenoisingAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
model.train()
for epoch in range(3):
    for i in range(0, 512, 64):
        xb = data[i : i + 64]
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(xb), xb)  # expect-related: eval-mode-in-train
        loss.backward()
        optimizer.step()
    model.eval()  # expect: eval-mode-in-train
    with torch.no_grad():
        val_loss = sum(nn.functional.mse_loss(model.reconstruct(val[j : j + 32]), val[j : j + 32]).item()
                       for j in range(0, 128, 32)) / 4
    print(f"epoch {epoch} train {loss.item():.4f} val {val_loss:.4f}")
