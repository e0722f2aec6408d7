# AMP on the CPU (bfloat16 autocast + GradScaler): the epoch loss summed as a tensor.
import torch
from torch import nn
from _common import batches, net

model = net()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cpu")
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)


def train_one_epoch(data):
    model.train()
    epoch_loss = 0.0
    for x, y in data:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)  # expect-related: graph-retained
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        epoch_loss += loss  # expect: graph-retained
    return epoch_loss / len(data)


for epoch in range(2):
    print(epoch, float(train_one_epoch(batches())))
