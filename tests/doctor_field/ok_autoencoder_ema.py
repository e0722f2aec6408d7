# Field corpus: a convolutional autoencoder with an exponential moving average of the
# weights (torch.optim.swa_utils.AveragedModel with an EMA avg_fn, updated after every
# optimizer step), OneCycleLR stepped per batch, and the EMA model evaluated under no_grad.
# source: pattern of https://pytorch.org/docs/stable/optim.html#weight-averaging-swa-and-ema
import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
images = torch.rand(384, 1, 16, 16)
images[:, :, 4:12, 4:12] = 1.0
loader = DataLoader(TensorDataset(images), batch_size=32, shuffle=True)
val_images = torch.rand(64, 1, 16, 16)


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(1, 8, 3, stride=2, padding=1), nn.ReLU(),
                                     nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
            nn.ConvTranspose2d(8, 1, 3, stride=2, padding=1, output_padding=1), nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))


model = AutoEncoder()
ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
epochs = 3
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, epochs=epochs,
                                                steps_per_epoch=len(loader))
criterion = nn.MSELoss()
for epoch in range(epochs):
    model.train()
    for (batch,) in loader:
        recon = model(batch)
        loss = criterion(recon, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        ema_model.update_parameters(model)
    ema_model.eval()
    with torch.no_grad():
        val_loss = criterion(ema_model(val_images), val_images).item()
    print(f"epoch {epoch}: train {loss.item():.4f} ema val {val_loss:.4f}")
