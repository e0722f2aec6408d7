# A cosine schedule is set up but scheduler.step() was never added to the loop: the
# learning rate stays at its initial value for the whole run.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

EPOCHS = 4
torch.manual_seed(0)
x = torch.randn(640, 12)
y = (x[:, :4].sum(1) > 0).long()
train_loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)

model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)  # expect: scheduler-not-stepped
criterion = nn.CrossEntropyLoss()

for epoch in range(EPOCHS):
    model.train()
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f} lr {optimizer.param_groups[0]['lr']:.4f}")
