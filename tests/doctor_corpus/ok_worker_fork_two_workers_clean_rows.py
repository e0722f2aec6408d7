# CSV-like rows parsed in two forked workers, every row well formed.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

ROWS = [f"{(i * 13) % 10 / 10},{(i * 7) % 10 / 10},{(i * 3) % 10 / 10},{i % 2}" for i in range(120)]


class CsvRows(Dataset):
    def __len__(self):
        return len(ROWS)

    def __getitem__(self, i):
        fields = ROWS[i].split(",")
        return torch.tensor([float(v) for v in fields[:3]]), int(fields[3])


loader = DataLoader(CsvRows(), batch_size=24, shuffle=True, num_workers=2)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(2):
    for features, label in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(features), label).backward()
        opt.step()
    print("epoch", epoch)
