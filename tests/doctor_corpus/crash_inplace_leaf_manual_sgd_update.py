# Linear regression with hand-made weight tensors and a hand-written SGD update that
# forgot torch.no_grad(): `w -= lr * w.grad` is an in-place op on a leaf that requires grad.
import torch

torch.manual_seed(0)
x = torch.randn(256, 3)
y = x @ torch.tensor([1.5, -2.0, 0.5]) + 0.3
w = torch.zeros(3, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
lr = 0.1
for epoch in range(20):
    pred = x @ w + b
    loss = ((pred - y) ** 2).mean()
    loss.backward()
    w -= lr * w.grad  # expect: inplace-on-leaf
    b -= lr * b.grad
    w.grad.zero_()
    b.grad.zero_()
    print(epoch, loss.item())
