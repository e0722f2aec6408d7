# Fitting a small polynomial-feature regression full-batch with L-BFGS and a closure,
# the way the PyTorch docs and many scientific scripts do.
import torch
from torch import nn

torch.manual_seed(0)
t = torch.linspace(-1, 1, 200).unsqueeze(1)
target = 0.5 * t**3 - t + 0.3 + 0.05 * torch.randn_like(t)
features = torch.cat([t, t**2, t**3], dim=1)

model = nn.Linear(3, 1)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5, line_search_fn="strong_wolfe")
criterion = nn.MSELoss()


def closure():
    optimizer.zero_grad()
    loss = criterion(model(features), target)
    loss.backward()
    return loss


for i in range(8):
    loss = optimizer.step(closure)
    print(f"iteration {i}: mse {loss.item():.6f}")
print("coefficients", model.weight.data.squeeze().tolist(), "bias", model.bias.item())
