# A CSV-row dataset parsed in the workers; one malformed row raises ValueError inside
# worker 0, and the main process gets "Caught ValueError in DataLoader worker process 0".
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

ROWS = [f"{i % 7},{(i * 13) % 10 / 10},{(i * 7) % 10 / 10},{i % 2}" for i in range(200)]
ROWS[70] = "3,0.4,n/a,1"


class CsvRows(Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        fields = self.rows[i].split(",")
        features = torch.tensor([float(v) for v in fields[:3]])
        return features, int(fields[3])


def main():
    loader = DataLoader(CsvRows(ROWS), batch_size=20, num_workers=1)  # expect: dataloader-worker-died
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for features, label in loader:  # expect-related: dataloader-worker-died
            opt.zero_grad()
            nn.functional.cross_entropy(model(features), label).backward()
            opt.step()
        print("epoch", epoch)


if __name__ == "__main__":
    main()
