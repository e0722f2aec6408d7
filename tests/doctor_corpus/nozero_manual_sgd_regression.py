# pytorch/examples' regression with model.zero_grad() removed: a hand-written update.
import torch
import torch.nn.functional as F

torch.manual_seed(0)
W_target = torch.randn(4, 1) * 5
fc = torch.nn.Linear(4, 1)
for batch_idx in range(60):
    x = torch.randn(32, 4)
    y = x @ W_target + 0.5
    output = F.smooth_l1_loss(fc(x), y)
    output.backward()
    for param in fc.parameters():
        param.data.add_(-0.01 * param.grad)  # expect: missing-zero-grad
