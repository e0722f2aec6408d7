# A function-based train/validate split; validate() sets eval mode but forgets no_grad.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(512, 8)
y = (x[:, 0] > 0).long()
train_loader = DataLoader(TensorDataset(x[:384], y[:384]), batch_size=32, shuffle=True)
val_loader = DataLoader(TensorDataset(x[384:], y[384:]), batch_size=32)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()


def train(loader):
    model.train()
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()


def validate(loader):
    model.eval()
    val_loss, correct = 0.0, 0
    for inputs, targets in loader:
        outputs = model(inputs)  # expect: eval-builds-graph
        val_loss += criterion(outputs, targets).item()
        correct += (outputs.argmax(1) == targets).sum().item()
    return val_loss / len(loader), correct / len(loader.dataset)


for epoch in range(3):
    train(train_loader)
    print(epoch, validate(val_loader))
