# (review script) expected: param-without-grad@18
import torch
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader

CFG = {"d_in": 12, "d_h": 32, "n_cls": 3, "use_aux": False, "lr": 1e-2, "epochs": 3}


class Net(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.trunk = nn.Sequential(
            nn.Linear(cfg["d_in"], cfg["d_h"]), nn.GELU(),
            nn.Linear(cfg["d_h"], cfg["d_h"]), nn.GELU(),
        )
        self.head = nn.Linear(cfg["d_h"], cfg["n_cls"])
        self.aux_head = nn.Sequential(nn.Linear(cfg["d_h"], 16), nn.ReLU(), nn.Linear(16, 1))  # expect: param-without-grad

    def forward(self, x):
        h = self.trunk(x)
        out = self.head(h)
        if self.cfg["use_aux"]:
            return out, self.aux_head(h)
        return out


class Data(Dataset):
    def __init__(self, n=300):
        g = torch.Generator().manual_seed(9)
        self.x = torch.randn(n, 12, generator=g)
        self.y = torch.bucketize(self.x[:, 0].contiguous(), torch.tensor([-0.4, 0.4]))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main():
    torch.manual_seed(0)
    model = Net(CFG)
    opt = torch.optim.AdamW(model.parameters(), lr=CFG["lr"])
    loader = DataLoader(Data(), batch_size=30, shuffle=True)
    for ep in range(CFG["epochs"]):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        print(ep, loss.item())


if __name__ == "__main__":
    main()
