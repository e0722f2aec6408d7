import torch
from _common import batches, net

model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
all_features = []  # every batch's features, kept on the device "for later analysis"
for i, (x, y) in enumerate(batches()):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    all_features.append(torch.randn(256, 1024).detach())  # 1 MiB a step
    if i == 30:
        gram = torch.empty(10**13)  # expect: oom
