# Logistic regression fitted full-batch with L-BFGS: the closure clears the gradients,
# recomputes the loss and backpropagates, and optimizer.step(closure) calls it as often
# as the line search needs.
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(400, 6)
w_true = torch.tensor([2.0, -1.0, 0.5, 0.0, 0.0, 1.5])
y = (x @ w_true + 0.3 * torch.randn(400) > 0).float()

model = nn.Linear(6, 1)
optimizer = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=4, history_size=10)
criterion = nn.BCEWithLogitsLoss()


def closure():
    optimizer.zero_grad()
    loss = criterion(model(x).squeeze(1), y) + 1e-3 * model.weight.pow(2).sum()
    loss.backward()
    return loss


for it in range(6):
    loss = optimizer.step(closure)
    print(f"outer iteration {it}: loss {loss.item():.4f}")
with torch.no_grad():
    acc = ((model(x).squeeze(1) > 0).float() == y).float().mean()
print(f"train accuracy {acc:.3f}")
