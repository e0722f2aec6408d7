# Written by a helper who had not seen the doctor's code (held-out, 2026-12-07): light PIL
# augmentation per sample, a few ms a batch in the main process; no finding expected.
"""Tiny CNN on synthetic MNIST-like digits with light PIL augmentation."""
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image, ImageFilter
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
np.random.seed(0)
random.seed(0)


def make_digit(label, rng):
    img = np.zeros((28, 28), dtype=np.uint8)
    # draw a crude "digit": a bar whose position depends on the label
    r = 4 + label * 2
    img[r:r + 3, 5:23] = 255
    img[5:23, 3 + label * 2:5 + label * 2] = 200
    img = np.clip(img.astype(np.int16) + rng.integers(0, 40, img.shape), 0, 255)
    return img.astype(np.uint8)


class DigitDataset(Dataset):
    def __init__(self, n, train=True):
        rng = np.random.default_rng(1 if train else 2)
        self.labels = rng.integers(0, 10, n)
        self.images = [make_digit(int(label), rng) for label in self.labels]
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        img = Image.fromarray(self.images[idx])
        if self.train:
            img = img.rotate(random.uniform(-12, 12), resample=Image.BILINEAR)
            if random.random() < 0.3:
                img = img.filter(ImageFilter.GaussianBlur(0.6))
        x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0)
        x = (x - 0.1307) / 0.3081
        return x.unsqueeze(0), int(self.labels[idx])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(64 * 12 * 12, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


train_loader = DataLoader(DigitDataset(960), batch_size=64, shuffle=True, num_workers=0)
val_loader = DataLoader(DigitDataset(256, train=False), batch_size=64, num_workers=0)

model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

for epoch in range(1, 3):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % 10 == 0:
            seen = f"{batch_idx * len(data)}/{len(train_loader.dataset)}"
            print(f"Train Epoch: {epoch} [{seen}] Loss: {loss.item():.4f}")

    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in val_loader:
            correct += (model(data).argmax(1) == target).sum().item()
    print(f"Epoch {epoch}: val acc {correct / len(val_loader.dataset):.3f}")
