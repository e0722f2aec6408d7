# A custom Dataset, a DataLoader, an AverageMeter fed with floats and a metric object
# that keeps integer tensors without history.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Blobs(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 6, generator=g)
        self.y = (self.x[:, 0] * self.x[:, 1] > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"features": self.x[i], "label": self.y[i]}


class AverageMeter:
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class Accuracy:
    def __init__(self):
        self.correct = torch.tensor(0)
        self.total = torch.tensor(0)

    def update(self, logits, target):
        self.correct += (logits.argmax(dim=1) == target).sum()
        self.total += target.numel()

    def compute(self):
        return (self.correct.float() / self.total).item()


torch.manual_seed(0)
train_loader = DataLoader(Blobs(384, 0), batch_size=32, shuffle=True)
val_loader = DataLoader(Blobs(128, 1), batch_size=32)
model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(3):
    model.train()
    losses, train_acc = AverageMeter(), Accuracy()
    for batch in train_loader:
        logits = model(batch["features"])
        loss = loss_fn(logits, batch["label"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.update(loss.item(), batch["label"].size(0))
        train_acc.update(logits, batch["label"])
    model.eval()
    val_acc = Accuracy()
    with torch.no_grad():
        for batch in val_loader:
            val_acc.update(model(batch["features"]), batch["label"])
    print(f"{epoch}: loss {losses.avg:.3f} train acc {train_acc.compute():.2f} "
          f"val acc {val_acc.compute():.2f}")
