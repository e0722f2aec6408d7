"""The same loop with both pitfalls fixed. Try:

    trainwell doctor examples/fixed_train.py
"""

import torch
from torch import nn
from torch.utils.data import DataLoader
from sklearn.datasets import load_digits

digits = load_digits()
x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
y = torch.tensor(digits.target)
train = DataLoader(list(zip(x[:1500], y[:1500])), batch_size=64, shuffle=True)
val = DataLoader(list(zip(x[1500:], y[1500:])), batch_size=256)

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(16 * 16, 64), nn.ReLU(), nn.Linear(64, 10),
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()

train_losses = []
for epoch in range(5):
    model.train()
    for inputs, targets in train:
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        train_losses.append(loss.item())  # a float: no graph kept

    model.eval()
    correct = 0
    with torch.no_grad():  # evaluation builds no graph
        for inputs, targets in val:
            correct += (model(inputs).argmax(1) == targets).sum().item()
    mean_loss = sum(train_losses[-len(train):]) / len(train)
    print(f"epoch {epoch}: loss {mean_loss:.3f}, val accuracy {correct / 297:.3f}")
