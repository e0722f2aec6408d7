# Plain SGD written by hand, as in the PyTorch tutorials: no optimizer object, the update
# and the gradient reset happen under no_grad, parameter by parameter.
import math

import torch
from torch import nn

torch.manual_seed(0)
x = torch.linspace(-math.pi, math.pi, 2000).unsqueeze(1)
y = torch.sin(x)
model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
loss_fn = nn.MSELoss()
learning_rate = 0.05

for t in range(300):
    idx = torch.randint(0, 2000, (64,))
    y_pred = model(x[idx])
    loss = loss_fn(y_pred, y[idx])
    if t % 100 == 99:
        print(t, loss.item())
    loss.backward()
    with torch.no_grad():
        for param in model.parameters():
            param -= learning_rate * param.grad
            param.grad.zero_()
