# EXPECT: none
# Fine-tuning with the backbone's batch-norm statistics kept from pretraining (mmdet's
# norm_eval): the backbone (conv + BN only, no dropout) is switched to eval once, right
# after model.train(); its weights, BN affine included, still train. No evaluation.
import torch
from torch import nn

torch.manual_seed(0)
backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
with torch.no_grad():  # stand-in for loading pretrained running statistics
    backbone(torch.randn(64, 3, 8, 8))
model = nn.Sequential(backbone, nn.Flatten(), nn.Linear(16, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
model.train()
model[0].eval()  # norm_eval=True: small batches, keep the pretrained BN statistics
x = torch.randn(192, 3, 8, 8)
y = (x[:, 0].mean((1, 2)) > 0).long() + 2 * (x[:, 1].mean((1, 2)) > 0).long()
for epoch in range(3):
    for i in range(0, 192, 4):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x[i : i + 4]), y[i : i + 4])
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
