# The same class-by-class tensors, fed with shuffle=True; the validation loader reads
# its (also sorted) set in order, which is fine: no training happens on it.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
xs, ys = [], []
for label in range(4):
    xs.append(torch.randn(150, 6) + 1.5 * label)
    ys.append(torch.full((150,), label))
x, y = torch.cat(xs), torch.cat(ys)
train_set = TensorDataset(x[::2].contiguous(), y[::2].contiguous())
val_set = TensorDataset(x[1::2].contiguous(), y[1::2].contiguous())
train_loader = DataLoader(train_set, batch_size=25, shuffle=True)
val_loader = DataLoader(val_set, batch_size=25, shuffle=False)
model = nn.Sequential(nn.Linear(6, 24), nn.ReLU(), nn.Linear(24, 4))
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
for epoch in range(3):
    for xb, yb in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    with torch.no_grad():
        acc = torch.cat([model(xb).argmax(1) == yb for xb, yb in val_loader]).float().mean()
    print(f"epoch {epoch}: val acc {acc:.3f}")
