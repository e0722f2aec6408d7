# The twin of bottleneck_imagefolder_style_multiline_loader: the images are decoded
# once ahead of time and cached as tensors, so __getitem__ only indexes.
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class CachedImages(torch.utils.data.Dataset):
    def __init__(self, n=400):
        g = torch.Generator().manual_seed(0)
        self.images = (torch.rand(n, 3, 12, 12, generator=g) - 0.5) / 0.25
        self.labels = torch.arange(n) % 5

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3)
        self.fc = nn.Linear(8 * 5 * 5, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        return self.fc(torch.flatten(x, 1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(1)
    train_loader = torch.utils.data.DataLoader(
        CachedImages(),
        batch_size=args.batch_size,
        shuffle=True,
    )
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % 10 == 0:
            print(f"[{batch_idx * len(data)}]\tLoss: {loss.item():.6f}")


if __name__ == "__main__":
    main()
