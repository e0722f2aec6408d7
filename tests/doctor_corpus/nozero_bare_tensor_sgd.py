# Linear regression with bare tensors and a hand-written update: the gradients are never
# cleared, so each update applies the sum of all gradients so far.
import torch

torch.manual_seed(0)
X = torch.randn(400, 3)
y = X @ torch.tensor([2.0, -1.0, 0.5]) + 0.3
w = torch.zeros(3, requires_grad=True)
bias = torch.zeros(1, requires_grad=True)
for epoch in range(40):
    pred = X @ w + bias
    loss = ((pred - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w.sub_(0.05 * w.grad)  # expect: missing-zero-grad
        bias.sub_(0.05 * bias.grad)
