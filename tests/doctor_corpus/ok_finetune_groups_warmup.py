# EXPECT: none
# Fine-tuning: the stem is frozen, the optimizer is built from
# filter(lambda p: p.requires_grad, ...) with a lower LR for the backbone than for the
# head, and a linear warmup followed by cosine decay (SequentialLR), stepped per batch.
import torch
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.backbone = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16),
                                      nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(16, num_classes))

    def forward(self, x):
        return self.head(self.backbone(self.stem(x)))


model = Classifier()
for p in model.stem.parameters():
    p.requires_grad = False
backbone_params = filter(lambda p: p.requires_grad, model.backbone.parameters())
optimizer = torch.optim.SGD([
    {"params": backbone_params, "lr": 0.01},
    {"params": model.head.parameters(), "lr": 0.1},
], momentum=0.9, weight_decay=1e-4)
ds = TensorDataset(torch.randn(256, 3, 16, 16), torch.randint(0, 4, (256,)))
loader = DataLoader(ds, batch_size=32, shuffle=True)
epochs, warmup = 3, 4
total = epochs * len(loader)
warmup_sched = LinearLR(optimizer, start_factor=0.1, total_iters=warmup)
cosine_sched = CosineAnnealingLR(optimizer, T_max=total - warmup)
scheduler = SequentialLR(optimizer, [warmup_sched, cosine_sched], milestones=[warmup])
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
for epoch in range(epochs):
    model.train()
    running = 0.0
    for images, labels in loader:
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        scheduler.step()
        running += loss.item()
    print(f"epoch {epoch} loss {running / len(loader):.4f} lr {optimizer.param_groups[1]['lr']:.4f}")
