# An MNIST-style classifier whose Dataset standardizes every pixel by the training set's
# per-pixel mean and std in __getitem__. The border pixels are 0 in every digit, so
# their std is 0: (x - mean) / std is 0/0 = NaN there, in every sample of every batch.
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


def fake_digits(n, size=12, border=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    images = torch.zeros(n, size, size)
    inner = size - 2 * border
    images[:, border:-border, border:-border] = torch.rand(n, inner, inner, generator=g)
    return images, torch.randint(0, 10, (n,), generator=g)


class DigitsDataset(Dataset):
    def __init__(self, images, labels):
        self.images, self.labels = images, labels
        self.mean = images.mean(0)
        self.std = images.std(0)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        image = (self.images[idx] - self.mean) / self.std  # expect: nonfinite-input
        return image.unsqueeze(0), self.labels[idx]


torch.manual_seed(0)
images, labels = fake_digits(512)
train_loader = DataLoader(DigitsDataset(images, labels), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 10 * 10, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for epoch in range(2):
    for batch_idx, (data, target) in enumerate(train_loader):  # expect-related: nonfinite-input
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
