# pytorch/examples vae/main.py, cut down in size (8x8 "images", random data instead of
# MNIST), with the planted bug: the standard deviation is sqrt(logvar) instead of
# exp(0.5 * logvar). A negative log-variance gives NaN, the sigmoid passes it on, and
# binary_cross_entropy raises "all elements of input should be between 0 and 1".
import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F

torch.manual_seed(1)
device = torch.device("cpu")
batch_size = 32
images = (torch.rand(512, 1, 8, 8) > 0.5).float()
train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images),
                                           batch_size=batch_size, shuffle=True)


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()

        self.fc1 = nn.Linear(64, 40)
        self.fc21 = nn.Linear(40, 8)
        self.fc22 = nn.Linear(40, 8)
        self.fc3 = nn.Linear(8, 40)
        self.fc4 = nn.Linear(40, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.sqrt(logvar)  # expect: nonfinite-loss
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


model = VAE().to(device)
optimizer = optim.Adam(model.parameters(), lr=1e-3)


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction="sum")  # expect-related: nonfinite-loss

    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())

    return BCE + KLD


def train(epoch):
    model.train()
    train_loss = 0
    for batch_idx, (data,) in enumerate(train_loader):
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
    print(f"====> Epoch: {epoch} Average loss: {train_loss / len(train_loader.dataset):.4f}")


for epoch in range(1, 3):
    train(epoch)
