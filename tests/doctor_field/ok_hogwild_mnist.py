# Field corpus: the shape of pytorch/examples mnist_hogwild (a model in shared memory,
# mp.Process workers that each run train() with their own optimizer, then a test pass).
# source: https://github.com/pytorch/examples/blob/main/mnist_hogwild/main.py
import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def fake_mnist(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 1, 8, 8, generator=g) * 0.3
    x[torch.arange(n), 0, y % 8, y // 8] += 3.0
    return TensorDataset(x, y)


def train_epoch(epoch, model, data_loader, optimizer):
    model.train()
    for batch_idx, (data, target) in enumerate(data_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()


def train(rank, model, seed):
    torch.manual_seed(seed + rank)
    train_loader = DataLoader(fake_mnist(320, rank), batch_size=32, shuffle=True)
    optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    for epoch in range(1, 3):
        train_epoch(epoch, model, train_loader, optimizer)


def test(model):
    model.eval()
    correct = 0
    data = fake_mnist(200, 9)
    with torch.no_grad():
        pred = model(data.tensors[0]).argmax(dim=1)
        correct = (pred == data.tensors[1]).sum().item()
    print(f"Test accuracy: {correct}/200")


if __name__ == "__main__":
    torch.manual_seed(1)
    mp.set_start_method("spawn", force=True)
    model = Net()
    model.share_memory()
    processes = []
    for rank in range(2):
        p = mp.Process(target=train, args=(rank, model, 1))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
    test(model)
