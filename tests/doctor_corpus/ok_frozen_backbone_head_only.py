# Linear probing: the backbone is frozen with requires_grad_(False) and the optimizer
# holds only the head's parameters.
import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.backbone(x))


torch.manual_seed(0)
images = torch.randn(192, 1, 12, 12)
labels = torch.randint(0, 3, (192,))
images[labels == 1, :, :6] += 1.0
images[labels == 2, :, 6:] += 1.0
model = Classifier()
model.backbone.requires_grad_(False)
optimizer = torch.optim.Adam(model.head.parameters(), lr=1e-2)
for epoch in range(3):
    for i in range(0, 192, 32):
        loss = nn.functional.cross_entropy(model(images[i : i + 32]), labels[i : i + 32])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
