import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
ds = TensorDataset(torch.randn(512, 10), torch.randint(0, 3, (512,)))
loader = DataLoader(ds, batch_size=32, shuffle=True)
Xv, yv = torch.randn(128, 10), torch.randint(0, 3, (128,))
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
crit = nn.CrossEntropyLoss()
val_losses = []
for epoch in range(3):
    for xb, yb in loader:
        opt.zero_grad()
        crit(model(xb), yb).backward()
        opt.step()
    val_losses.append(crit(model(Xv), yv))  # expect: graph-retained # expect: eval-builds-graph
    print(epoch, val_losses[-1].item())
