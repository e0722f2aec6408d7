# CrossEntropyLoss gets the logits; softmax is only used to report confidences on the
# validation set, under no_grad.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
centers = 2 * torch.randn(6, 16)
labels = torch.randint(0, 6, (700,))
data = TensorDataset(centers[labels] + torch.randn(700, 16), labels)
train_dl = DataLoader(torch.utils.data.Subset(data, range(600)), batch_size=50, shuffle=True)
val_x, val_y = data.tensors[0][600:], data.tensors[1][600:]
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 6))
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    for xb, yb in train_dl:
        logits = model(xb)
        loss = criterion(logits, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        probs = torch.softmax(model(val_x), dim=1)
        conf, pred = probs.max(dim=1)
    acc = (pred == val_y).float().mean().item()
    print(f"epoch {epoch}: loss {loss.item():.4f} val acc {acc:.3f} mean conf {conf.mean():.3f}")
