# A torchvision-style dataset keeps `targets` grouped by class (as ImageFolder does);
# the script splits it with a contiguous Subset and trains on it without shuffling.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset


class ShapesDataset(Dataset):
    classes = ("circle", "square", "triangle", "star")

    def __init__(self, per_class=120):
        g = torch.Generator().manual_seed(0)
        self.targets = [c for c in range(len(self.classes)) for _ in range(per_class)]
        self.images = torch.rand(len(self.targets), 1, 6, 6, generator=g)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        label = self.targets[index]
        return self.images[index] + 0.2 * label, label


full = ShapesDataset()
train_set = Subset(full, range(0, 400))
val_set = Subset(full, range(400, len(full)))
train_loader = DataLoader(train_set, batch_size=20)  # expect: sorted-labels-no-shuffle
val_loader = DataLoader(val_set, batch_size=20)
torch.manual_seed(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(36, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(2):
    model.train()
    for images, labels in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        hits = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
    print(f"epoch {epoch}: val acc {hits / len(val_set):.3f}")
