# EXPECT: unregistered-module@24
# The blocks are kept in a plain list; their weights were added to the optimizer by
# hand so they do train, but model.eval() never reaches their Dropout (validation is
# noisy) and state_dict() leaves them out of the checkpoint.
import itertools
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return x + self.drop(torch.relu(self.fc(x)))


class Net(nn.Module):
    def __init__(self, d=16, depth=3):
        super().__init__()
        self.inp = nn.Linear(8, d)
        self.blocks = [Block(d) for _ in range(depth)]  # expect: unregistered-module
        self.out = nn.Linear(d, 2)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.out(h)


torch.manual_seed(0)
net = Net()
params = itertools.chain(net.parameters(), *(b.parameters() for b in net.blocks))
optimizer = torch.optim.Adam(params, lr=1e-3)
x, y = torch.randn(256, 8), torch.randint(0, 2, (256,))
for epoch in range(3):
    net.train()
    for i in range(0, 224, 32):
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(x[i : i + 32]), y[i : i + 32]).backward()
        optimizer.step()
    net.eval()
    with torch.no_grad():
        accs = [(net(x[224:]).argmax(1) == y[224:]).float().mean().item() for _ in range(2)]
    print(f"epoch {epoch} val acc (two runs) {accs[0]:.3f} {accs[1]:.3f} saved keys {len(net.state_dict())}")
