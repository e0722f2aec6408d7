# A custom Dataset that moves every sample to the GPU in __getitem__ ("so the batches
# arrive on the device"): on a GPU machine the workers cannot use CUDA, and with
# num_workers=0 each sample is its own tiny copy. Here (no GPU) it runs on the CPU.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

device = "cuda" if torch.cuda.is_available() else "cpu"


class TabularDataset(Dataset):
    def __init__(self, n=600):
        g = torch.Generator().manual_seed(0)
        self.features = torch.randn(n, 10, generator=g)
        self.target = (self.features[:, 0] + self.features[:, 1] > 0).long()

    def __len__(self):
        return len(self.target)

    def __getitem__(self, idx):
        x = self.features[idx].to(device)  # expect: cuda-in-getitem
        y = self.target[idx].to(device)
        return x, y


loader = DataLoader(TabularDataset(), batch_size=50, shuffle=True)  # expect-related: cuda-in-getitem
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(3):
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
