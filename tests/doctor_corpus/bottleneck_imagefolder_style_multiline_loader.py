# pytorch/examples-style image classifier: a Dataset that "opens and decodes" each file
# in __getitem__ (the sleep stands for PIL), loaded in the main process by a DataLoader
# written over several lines; the small CNN waits on the data most of each step.
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class FolderImages(torch.utils.data.Dataset):
    def __init__(self, root, n=200, transform=None):
        self.root, self.n, self.transform = root, n, transform

    def __len__(self):
        return self.n

    def __getitem__(self, index):  # expect-related: data-bottleneck
        time.sleep(0.008)  # Image.open(path).convert("RGB")
        g = torch.Generator().manual_seed(index)
        img = torch.rand(3, 12, 12, generator=g)
        if self.transform is not None:
            img = self.transform(img)
        return img, index % 5


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3)
        self.fc = nn.Linear(8 * 5 * 5, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        return self.fc(torch.flatten(x, 1))


def train(args, model, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}]\tLoss: {loss.item():.6f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(1)
    dataset = FolderImages("data/train", transform=lambda t: (t - 0.5) / 0.25)
    train_loader = torch.utils.data.DataLoader(  # expect: data-bottleneck
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
    )
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for epoch in range(1, args.epochs + 1):
        train(args, model, train_loader, optimizer, epoch)


if __name__ == "__main__":
    main()
