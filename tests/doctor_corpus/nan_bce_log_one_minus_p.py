# (review script) expected: nonfinite-loss@10
import torch
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader


def my_bce(p, y):
    # hand-rolled BCE (clamped on the log(p) side only)
    pos = y * torch.log(p.clamp(min=1e-7))
    neg = (1 - y) * torch.log(1 - p)  # expect: nonfinite-loss
    return -(pos + neg).mean()


class Clicks(Dataset):
    def __init__(self, n=320):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 10, generator=g) * 30.0
        self.y = (self.x[:, 0] > 0).float()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))
        with torch.no_grad():
            self.model[2].weight.mul_(20)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg["lr"])
        self.loader = DataLoader(Clicks(), batch_size=cfg["bs"], shuffle=True)

    def train_epoch(self):
        for x, y in self.loader:
            p = torch.sigmoid(self.model(x)).squeeze(1)
            loss = my_bce(p, y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    t = Trainer({"lr": 0.01, "bs": 32})
    for ep in range(2):
        print(ep, t.train_epoch())
