import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh())
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.body(x)).squeeze(-1)


def train(model, data, epochs=3, lr=0.05):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for epoch in range(epochs):
        total = 0.0
        for xb, yb in data:
            model.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch}: mse {total / len(data):.4f}")


torch.manual_seed(0)
x = torch.randn(512, 16)
y = torch.sin(x[:, 0]) + 0.5 * x[:, 1]
train(Net(), [(x[i : i + 32], y[i : i + 32]) for i in range(0, 512, 32)])
