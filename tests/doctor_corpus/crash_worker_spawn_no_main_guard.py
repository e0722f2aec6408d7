# Written on Linux, run where workers start with "spawn" (Windows, macOS; here forced
# with multiprocessing_context): without an `if __name__ == "__main__":` guard each
# worker re-runs this script from the top, tries to start workers of its own, and dies.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(256, 8)
y = (x.sum(1) > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, num_workers=1,  # expect: dataloader-worker-died
                    multiprocessing_context="spawn")
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for xb, yb in loader:  # expect-related: dataloader-worker-died
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    print("epoch", epoch)
