# Field corpus: the shape of yunjey/pytorch-tutorial generative_adversarial_network/main.py
# (D and G as nn.Sequential with LeakyReLU / Tanh, BCELoss, reset_grad() clearing both
# optimizers, a denorm helper, fake images kept for saving under no_grad).
# source: https://github.com/yunjey/pytorch-tutorial/blob/master/tutorials/03-advanced/generative_adversarial_network/main.py
import torch
import torch.nn as nn

torch.manual_seed(0)
latent_size, hidden_size, image_size, batch_size = 16, 64, 64, 32
images_all = torch.tanh(torch.randn(320, image_size))
data_loader = torch.utils.data.DataLoader(images_all, batch_size=batch_size, shuffle=True)

D = nn.Sequential(
    nn.Linear(image_size, hidden_size),
    nn.LeakyReLU(0.2),
    nn.Linear(hidden_size, hidden_size),
    nn.LeakyReLU(0.2),
    nn.Linear(hidden_size, 1),
    nn.Sigmoid())
G = nn.Sequential(
    nn.Linear(latent_size, hidden_size),
    nn.ReLU(),
    nn.Linear(hidden_size, hidden_size),
    nn.ReLU(),
    nn.Linear(hidden_size, image_size),
    nn.Tanh())

criterion = nn.BCELoss()
d_optimizer = torch.optim.Adam(D.parameters(), lr=0.0002)
g_optimizer = torch.optim.Adam(G.parameters(), lr=0.0002)


def denorm(x):
    out = (x + 1) / 2
    return out.clamp(0, 1)


def reset_grad():
    d_optimizer.zero_grad()
    g_optimizer.zero_grad()


total_step = len(data_loader)
for epoch in range(4):
    for i, images in enumerate(data_loader):
        images = images.reshape(images.size(0), -1)
        real_labels = torch.ones(images.size(0), 1)
        fake_labels = torch.zeros(images.size(0), 1)
        # Train the discriminator
        outputs = D(images)
        d_loss_real = criterion(outputs, real_labels)
        real_score = outputs
        z = torch.randn(images.size(0), latent_size)
        fake_images = G(z)
        outputs = D(fake_images)
        d_loss_fake = criterion(outputs, fake_labels)
        fake_score = outputs
        d_loss = d_loss_real + d_loss_fake
        reset_grad()
        d_loss.backward()
        d_optimizer.step()
        # Train the generator
        z = torch.randn(images.size(0), latent_size)
        fake_images = G(z)
        outputs = D(fake_images)
        g_loss = criterion(outputs, real_labels)
        reset_grad()
        g_loss.backward()
        g_optimizer.step()
        if (i + 1) % 5 == 0:
            print(f"Epoch [{epoch}], Step [{i + 1}/{total_step}], d_loss: {d_loss.item():.4f}, "
                  f"g_loss: {g_loss.item():.4f}, D(x): {real_score.mean().item():.2f}, "
                  f"D(G(z)): {fake_score.mean().item():.2f}")
    with torch.no_grad():
        samples = denorm(G(torch.randn(8, latent_size)))
