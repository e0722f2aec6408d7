# A hand-written cross-entropy with label smoothing, computed from log_softmax of the
# logits (never log of softmax), so a very confident model still gives a finite loss.
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
centers = torch.randn(4, 10) * 3
labels = torch.randint(0, 4, (512,))
features = centers[labels] + 0.3 * torch.randn(512, 10)
loader = DataLoader(TensorDataset(features, labels), batch_size=64, shuffle=True)

model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)


def smoothed_cross_entropy(logits, target, smoothing=0.05):
    n_classes = logits.shape[1]
    soft = F.one_hot(target, n_classes).float() * (1 - smoothing) + smoothing / n_classes
    return -(soft * F.log_softmax(logits, dim=1)).sum(dim=1).mean()


for epoch in range(6):
    for xb, yb in loader:
        loss = smoothed_cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        probs = model(features).softmax(dim=1)
    print(f"epoch {epoch}: loss {loss.item():.4f} mean max prob {probs.max(1).values.mean():.3f}")
