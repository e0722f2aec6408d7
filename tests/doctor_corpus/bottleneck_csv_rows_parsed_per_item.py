# Tabular rows kept as text and parsed (slowly) on every access, in a step-counted loop
# with a while/next over an epoch iterator; the loader is built in a helper.
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class CsvRows(Dataset):
    def __init__(self, lines):
        self.lines = lines

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, idx):  # expect-related: data-bottleneck
        time.sleep(0.002)  # a slow parser and feature engineering per row
        *features, label = self.lines[idx].split(",")
        return torch.tensor([float(v) for v in features]), int(label)


def make_loader(lines, batch_size=32):
    return DataLoader(CsvRows(lines), batch_size=batch_size, shuffle=True, drop_last=True)


torch.manual_seed(0)
rows = [",".join(f"{v:.3f}" for v in torch.randn(6).tolist()) + f",{i % 2}" for i in range(1600)]
loader = make_loader(rows)  # expect: data-bottleneck
model = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step, it = 0, iter(loader)
while step < 30:
    try:
        x, y = next(it)
    except StopIteration:
        it = iter(loader)
        continue
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    step += 1
