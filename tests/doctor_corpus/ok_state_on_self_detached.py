import torch
from torch import nn


class Tracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(3, 9, batch_first=True)
        self.head = nn.Linear(9, 2)
        self.h = None

    def forward(self, x):
        y, h = self.rnn(x, self.h)
        self.h = h.detach()
        return self.head(y[:, -1])


torch.manual_seed(0)
tracker = Tracker()
opt = torch.optim.Adam(tracker.parameters(), lr=1e-3)
for chunk in range(6):
    x = torch.randn(5, 7, 3)
    y = torch.randint(0, 2, (5,))
    loss = nn.functional.cross_entropy(tracker(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
