# A config dict whose learning rate is 100x too high for SGD on this MLP: the loss
# diverges over a few steps and turns NaN.
import torch
import torch.nn.functional as F
from torch import nn

config = {
    "hidden": 64,
    "lr": 5.0,  # expect-related: nonfinite-loss
    "steps": 40,
    "batch_size": 64,
}


class Regressor(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, hidden), nn.Tanh(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)  # expect: nonfinite-loss


torch.manual_seed(0)
x = torch.randn(2048, 6) * 3
y = x.pow(2).sum(1)
model = Regressor(config["hidden"])
optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])  # expect-related: nonfinite-loss
for step in range(config["steps"]):
    idx = torch.randint(0, len(x), (config["batch_size"],))
    loss = F.mse_loss(model(x[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
