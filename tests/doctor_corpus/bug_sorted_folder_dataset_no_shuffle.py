# An ImageFolder-style dataset: samples are listed folder by folder (class by class),
# as os.listdir over "cats/" then "dogs/" gives them, and the loader has shuffle=False.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class FolderImages(Dataset):
    def __init__(self, classes=("cat", "dog"), per_class=160, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.samples = []
        for idx, name in enumerate(classes):
            for k in range(per_class):
                self.samples.append((f"{name}/{k:04d}.png", idx))
        self.pixels = torch.rand(len(self.samples), 1, 8, 8, generator=g)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        _, label = self.samples[i]
        image = self.pixels[i] + 0.3 * label
        return image, label


dataset = FolderImages()
loader = DataLoader(dataset, batch_size=16, shuffle=False, num_workers=0)  # expect: sorted-labels-no-shuffle
torch.manual_seed(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
criterion = nn.CrossEntropyLoss()
for epoch in range(2):
    for images, labels in loader:  # expect-related: sorted-labels-no-shuffle
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: last loss {loss.item():.3f}")
