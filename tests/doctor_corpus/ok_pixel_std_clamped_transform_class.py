# A torchvision-style pipeline: the Dataset applies `transform`, a callable
# PixelStandardize whose std is clamped away from 0 for the constant border. Correct.
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class PixelStandardize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, img):
        img = torch.as_tensor(img, dtype=torch.float32)
        return (img - self.mean) / self.std.clamp(min=1e-6)


class ImageFolderLike(Dataset):
    def __init__(self, images, targets, transform=None):
        self.images, self.targets, self.transform = images, targets, transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        img, target = self.images[index], int(self.targets[index])
        if self.transform is not None:
            img = self.transform(img)
        return img.unsqueeze(0), target


rng = np.random.default_rng(0)
images = np.zeros((400, 10, 10), dtype=np.float32)
images[:, 1:-1, 1:-1] = rng.random((400, 8, 8))
targets = rng.integers(0, 10, size=400)
mean = torch.from_numpy(images.mean(0))
std = torch.from_numpy(images.std(0))

torch.manual_seed(0)
dataset = ImageFolderLike(images, targets, transform=PixelStandardize(mean, std))
loader = DataLoader(dataset, batch_size=50, shuffle=True)
net = nn.Sequential(nn.Flatten(), nn.Linear(100, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for epoch in range(2):
    for inputs, labels in loader:
        optimizer.zero_grad()
        loss = criterion(net(inputs), labels)
        loss.backward()
        optimizer.step()
