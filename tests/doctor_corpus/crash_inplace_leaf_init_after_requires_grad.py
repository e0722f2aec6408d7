# A from-scratch two-layer network whose weights are made with requires_grad=True and
# then initialised in place: uniform_() on a leaf that already requires grad.
import math

import torch


def init_layer(fan_in, fan_out):
    weight = torch.empty(fan_in, fan_out, requires_grad=True)
    bound = 1 / math.sqrt(fan_in)
    weight.uniform_(-bound, bound)  # expect: inplace-on-leaf
    return weight


torch.manual_seed(0)
W1, W2 = init_layer(10, 32), init_layer(32, 2)
optimizer = torch.optim.SGD([W1, W2], lr=0.1)
x = torch.randn(128, 10)
y = (x[:, 0] > 0).long()
for step in range(10):
    logits = torch.relu(x @ W1) @ W2
    loss = torch.nn.functional.cross_entropy(logits, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
