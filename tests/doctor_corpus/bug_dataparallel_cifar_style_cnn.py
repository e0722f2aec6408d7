# A CIFAR-style CNN tutorial loop that wraps the model in nn.DataParallel "to use all
# the GPUs": single-process, GIL-bound, and the weights are copied every forward.
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
images = torch.randn(320, 3, 16, 16)
labels = torch.randint(0, 10, (320,))
trainloader = DataLoader(TensorDataset(images, labels), batch_size=32, shuffle=True)

net = Net()
net = nn.DataParallel(net)  # expect: data-parallel
net.to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

for epoch in range(2):
    running_loss = 0.0
    for inputs, targets in trainloader:
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()
        loss = criterion(net(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    print(f"[{epoch + 1}] loss: {running_loss / len(trainloader):.3f}")
