# A small MLP regressor trained with plain SGD at a learning rate far too high for it:
# every update overshoots, the weights blow up and within a few steps a layer overflows.
import torch
from torch import nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.fc3 = nn.Linear(d_hidden, 1)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        h = F.relu(self.fc2(h))  # expect: nonfinite-loss
        return self.fc3(h).squeeze(-1)


def train(model, x, y, lr, steps, batch_size=32):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)  # expect-related: nonfinite-loss
    for step in range(steps):
        idx = torch.randint(0, len(x), (batch_size,))
        pred = model(x[idx])
        loss = F.mse_loss(pred, y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step}: mse {loss.item():.3e}")


torch.manual_seed(0)
x = 3.0 * torch.randn(1024, 12)
y = (x[:, 0] > 0).float() + (x[:, 1] > 0).float()
train(MLP(12, 64), x, y, lr=1.0, steps=30)  # expect-related: nonfinite-loss
