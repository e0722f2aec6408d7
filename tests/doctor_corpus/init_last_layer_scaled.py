# A custom init multiplies the classifier's weights by 100 ("to break symmetry"): the
# untrained model is extremely confident and its first loss is far above ln(4).
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.classifier = nn.Linear(64, 4)
        with torch.no_grad():
            self.classifier.weight.mul_(100.0)

    def forward(self, x):
        return self.classifier(self.features(x))


torch.manual_seed(0)
x = torch.randn(512, 16)
y = x[:, :4].argmax(1)
loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
model = Net()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)  # expect: loss-at-init
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
