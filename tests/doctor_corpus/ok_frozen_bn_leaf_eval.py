# Fine-tuning with frozen batch norm: the BatchNorm affine parameters are frozen and
# only the BatchNorm layers are put in eval mode at the start of each epoch; everything
# else, dropout included, trains in train mode.
import torch
from torch import nn


def freeze_bn(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eval()


torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
    nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(16, 2),
)
for m in model.modules():
    if isinstance(m, nn.BatchNorm2d):
        m.requires_grad_(False)
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9)
labels = torch.randint(0, 2, (256,))
images = torch.randn(256, 3, 8, 8)
images[:, 0] += labels.float().view(-1, 1, 1) - 0.5
for epoch in range(4):
    model.train()
    freeze_bn(model)
    for i in range(0, 256, 32):
        loss = nn.functional.cross_entropy(model(images[i : i + 32]), labels[i : i + 32])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
