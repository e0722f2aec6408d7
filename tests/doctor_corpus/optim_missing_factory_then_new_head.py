# (review script) expected: param-not-in-optimizer@38
import torch
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.classifier = nn.Linear(32, 10)

    def forward(self, x):
        return self.classifier(self.features(x))


class Synth(Dataset):
    def __init__(self, n=320, k=4):
        g = torch.Generator().manual_seed(8)
        self.x = torch.randn(n, 20, generator=g)
        self.y = self.x[:, :k].argmax(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def make_optimizer(model, cfg):
    return torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9,
                           weight_decay=cfg["wd"])


def finetune(cfg):
    torch.manual_seed(0)
    model = Backbone()
    optimizer = make_optimizer(model, cfg)  # expect: param-not-in-optimizer
    # new task has only 4 classes: swap the head
    model.classifier = nn.Linear(32, cfg["num_classes"])
    loader = DataLoader(Synth(k=cfg["num_classes"]), batch_size=32, shuffle=True)
    crit = nn.CrossEntropyLoss()
    for ep in range(cfg["epochs"]):
        for x, y in loader:
            optimizer.zero_grad()
            loss = crit(model(x), y)
            loss.backward()
            optimizer.step()
        print(ep, loss.item())


if __name__ == "__main__":
    finetune({"lr": 0.05, "wd": 1e-4, "num_classes": 4, "epochs": 3})
