# Fine-tuning with the backbone's batch-norm statistics frozen: the backbone is put in
# eval mode (as detection codebases do with norm_eval=True) while its weights still
# train; its output goes through the head into the loss and backward every step.
import torch
from torch import nn
from _common import batches

torch.manual_seed(0)
backbone = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU())
head = nn.Linear(16, 2)
opt = torch.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.05)
data = batches()
for epoch in range(2):
    backbone.eval()  # keep the pretrained running statistics
    head.train()
    for x, y in data[:30]:
        opt.zero_grad()
        features = backbone(x)
        loss = nn.functional.cross_entropy(head(features), y)
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = sum((head(backbone(x)).argmax(1) == y).float().mean().item() for x, y in data[30:])
    print(epoch, acc / 10)
