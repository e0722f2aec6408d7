# Field corpus: a tiny MNIST loop as in countless first tutorials (a torchvision-style
# Dataset whose __getitem__ converts one uint8 image to a float tensor and normalizes it
# with MNIST's mean and std, a DataLoader with batch_size 64, a two-layer MLP, one epoch and
# an accuracy). Per-batch data time is a few milliseconds: the whole run loses well under a
# second to data loading, so it is no bottleneck worth a warning.
# source: pattern of https://github.com/pytorch/examples/blob/main/mnist/main.py with a
# hand-written Dataset
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class MNISTLike(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.targets = torch.randint(0, 10, (n,), generator=g)
        self.data = torch.randint(0, 60, (n, 28, 28), generator=g, dtype=torch.uint8)
        for i, t in enumerate(self.targets.tolist()):
            self.data[i, 2 * t : 2 * t + 4, 4:24] = 255

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        img = self.data[index].float().div(255).unsqueeze(0)
        img = (img - 0.1307) / 0.3081
        return img, int(self.targets[index])


train_loader = DataLoader(MNISTLike(1920, 0), batch_size=64, shuffle=True)
test_loader = DataLoader(MNISTLike(512, 1), batch_size=256)
torch.manual_seed(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(2):
    model.train()
    for images, labels in train_loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for images, labels in test_loader:
            correct += (model(images).argmax(1) == labels).sum().item()
    print(f"epoch {epoch}: accuracy {correct / len(test_loader.dataset):.3f}")
