# Checkpoints as a dict of state_dicts (model, optimizer, scheduler, epoch), read back
# with weights_only=True to resume: the recommended way.
import os
import tempfile

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(512, 10)
y = x @ torch.randn(10, 1)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
path = os.path.join(tempfile.mkdtemp(), "last.pt")

for epoch in range(4):
    for i in range(0, 512, 64):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x[i : i + 64]), y[i : i + 64])
        loss.backward()
        optimizer.step()
    scheduler.step()
    torch.save(
        {
            "epoch": epoch,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
        },
        path,
    )
    print(f"epoch {epoch}: mse {loss.item():.4f}")

state = torch.load(path, weights_only=True)
model.load_state_dict(state["model"])
optimizer.load_state_dict(state["optimizer"])
print("resumed at epoch", state["epoch"] + 1)
