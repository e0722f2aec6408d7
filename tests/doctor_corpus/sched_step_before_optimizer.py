# The scheduler is stepped at the start of each epoch, before any optimizer.step() of
# that epoch: the first value of the schedule is skipped and everything shifts by one.
import torch
from torch import nn
from _common import batches


def train(model, data, epochs=3):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for epoch in range(epochs):
        scheduler.step()  # expect: scheduler-not-stepped
        print(f"epoch {epoch}: lr {scheduler.get_last_lr()[0]:.4f}")
        for x, y in data:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
train(model, batches(n=20))
