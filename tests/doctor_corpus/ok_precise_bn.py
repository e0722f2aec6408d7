# EXPECT: none
# "Precise BN" (as in pycls / detectron2): after each training epoch the batch-norm
# running statistics are recomputed over a few batches with the model in train mode
# under no_grad (momentum=None: a true average), before evaluating in eval mode.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


@torch.no_grad()
def compute_precise_bn_stats(model, loader, num_iters=4):
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm1d)]
    momenta = [bn.momentum for bn in bns]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    model.train()
    for i, (xb, _) in enumerate(loader):
        if i == num_iters:
            break
        model(xb)
    for bn, m in zip(bns, momenta):
        bn.momentum = m


torch.manual_seed(0)
x, y = torch.randn(384, 16), torch.randint(0, 2, (384,))
train_loader = DataLoader(TensorDataset(x[:320], y[:320]), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for epoch in range(3):
    model.train()
    for xb, yb in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    compute_precise_bn_stats(model, train_loader)
    model.eval()
    with torch.no_grad():
        acc = (model(x[320:]).argmax(1) == y[320:]).float().mean().item()
    print(f"epoch {epoch} acc {acc:.3f}")
