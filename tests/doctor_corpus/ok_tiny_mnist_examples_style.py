# pytorch/examples mnist/main.py, reduced in size: the torchvision MNIST dataset stood
# in for by a Dataset that does what it does per image (a PIL image from the uint8
# array, a rotation, ToTensor, an affine warp, Normalize), in the main process. Each
# batch waits several milliseconds for its images, most of a tiny step, but the whole
# run loses well under a second to it: no data-bottleneck worth a warning.
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from PIL import Image
from torch.optim.lr_scheduler import StepLR


class FakeMNIST(torch.utils.data.Dataset):
    def __init__(self, n, train=True):
        rng = np.random.default_rng(0 if train else 1)
        self.targets = rng.integers(0, 10, n)
        self.data = (rng.random((n, 28, 28)) * 60).astype(np.uint8)
        for i, t in enumerate(self.targets):  # a class-dependent bright bar
            self.data[i, 2 * t : 2 * t + 3, :] = 250

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img, target = self.data[index], int(self.targets[index])
        img = Image.fromarray(img, mode="L")
        img = img.rotate(float(np.random.uniform(-10, 10)), resample=Image.BILINEAR)
        x = torch.from_numpy(np.array(img, dtype=np.float32) / 255.0).unsqueeze(0)
        theta = torch.tensor([[1.0, 0.05, 0.02], [-0.05, 1.0, 0.0]]).unsqueeze(0)
        grid = F.affine_grid(theta, [1, 1, 28, 28], align_corners=False)  # RandomAffine
        x = F.grid_sample(x.unsqueeze(0), grid, align_corners=False).squeeze(0)
        return (x - 0.1307) / 0.3081, target


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]"
                  f"\tLoss: {loss.item():.6f}")


def test(model, device, test_loader):
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    print(f"Test set: Average loss: {test_loss / len(test_loader.dataset):.4f}, "
          f"Accuracy: {correct}/{len(test_loader.dataset)}")


def main():
    parser = argparse.ArgumentParser(description="PyTorch MNIST Example")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(1)
    device = torch.device("cpu")
    train_loader = torch.utils.data.DataLoader(FakeMNIST(1600), batch_size=args.batch_size,
                                               shuffle=True)
    test_loader = torch.utils.data.DataLoader(FakeMNIST(500, train=False),
                                              batch_size=args.test_batch_size)
    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()


if __name__ == "__main__":
    main()
