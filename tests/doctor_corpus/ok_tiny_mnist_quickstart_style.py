# The PyTorch "quickstart" tutorial loop (train_loop / test_loop over FashionMNIST),
# reduced in size: the dataset converts each uint8 image to a float tensor on access,
# in the main process. A few ms of waiting per batch, under a second in the run: the
# data is not what this run is waiting on.
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class FashionLike(Dataset):
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, 10, n)
        self.images = (rng.random((n, 28, 28)) * 255).astype(np.uint8)
        self.images[np.arange(n), self.labels, :] = 255

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        image = torch.from_numpy(self.images[idx].astype(np.float32)) / 255.0  # ToTensor
        image = (image - image.mean()) / (image.std() + 1e-6)
        return image.unsqueeze(0), int(self.labels[idx])


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(nn.Linear(28 * 28, 64), nn.ReLU(),
                                               nn.Linear(64, 10))

    def forward(self, x):
        return self.linear_relu_stack(self.flatten(x))


def train_loop(dataloader, model, loss_fn, optimizer):
    model.train()
    for batch, (X, y) in enumerate(dataloader):
        pred = model(X)
        loss = loss_fn(pred, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if batch % 10 == 0:
            print(f"loss: {loss.item():>7f}  [{(batch + 1) * len(X):>5d}/{len(dataloader.dataset):>5d}]")


def test_loop(dataloader, model, loss_fn):
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for X, y in dataloader:
            pred = model(X)
            test_loss += loss_fn(pred, y).item()
            correct += (pred.argmax(1) == y).type(torch.float).sum().item()
    print(f"Test Error: Accuracy: {100 * correct / len(dataloader.dataset):>0.1f}%, "
          f"Avg loss: {test_loss / len(dataloader):>8f}")


torch.manual_seed(0)
train_dataloader = DataLoader(FashionLike(1280, 0), batch_size=64, shuffle=True)
test_dataloader = DataLoader(FashionLike(256, 1), batch_size=64)
model = NeuralNetwork()
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
for t in range(3):
    print(f"Epoch {t + 1}")
    train_loop(train_dataloader, model, loss_fn, optimizer)
    test_loop(test_dataloader, model, loss_fn)
