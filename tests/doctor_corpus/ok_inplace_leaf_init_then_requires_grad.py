# The from-scratch network done right: initialise first, then requires_grad_(); the
# hand-written update runs under torch.no_grad().
import math

import torch


def init_layer(fan_in, fan_out):
    bound = 1 / math.sqrt(fan_in)
    weight = torch.empty(fan_in, fan_out).uniform_(-bound, bound)
    return weight.requires_grad_()


torch.manual_seed(0)
W1, W2 = init_layer(10, 32), init_layer(32, 2)
x = torch.randn(128, 10)
y = (x[:, 0] > 0).long()
lr = 0.2
for step in range(30):
    logits = torch.relu(x @ W1) @ W2
    loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    with torch.no_grad():
        for weight in (W1, W2):
            weight -= lr * weight.grad
            weight.grad = None
    if step % 10 == 0:
        print(step, loss.item())
