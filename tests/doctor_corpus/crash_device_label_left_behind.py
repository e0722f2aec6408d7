# (review script) written to the doctor's spec; expected: device-mismatch@23
# Training on an accelerator (the "meta" device stands in for cuda here): a helper moves
# the batch to the device but only the inputs; the labels stay on the CPU.
import torch
from torch import nn

DEVICE = torch.device("meta")


def to_device(batch):
    images, labels = batch
    return images.to(DEVICE, non_blocking=True), labels


torch.manual_seed(0)
data = [(torch.randn(16, 3, 8, 8), torch.randint(0, 4, (16,))) for _ in range(10)]
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4)).to(DEVICE)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for batch in data:
    images, labels = to_device(batch)
    outputs = model(images)
    loss = criterion(outputs, labels)  # expect: device-mismatch
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
