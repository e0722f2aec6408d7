# The label map grew a rare class ("other") after the model config was written: the
# head has NUM_CLASSES outputs, and the first batch holding an "other" label crashes.
# The finding points at the head's construction; the constant and the loss are related.
import torch
import torch.nn.functional as F
from torch import nn

LABELS = ["cat", "dog", "bird", "fish", "other"]
NUM_CLASSES = 4  # expect-related: label-out-of-range


class Classifier(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU())
        self.out = nn.Linear(64, n_classes)  # expect: label-out-of-range

    def forward(self, x):
        return self.out(self.body(x))


def train_step(model, optimizer, x, y):
    logits = model(x)
    loss = F.cross_entropy(logits, y)  # expect-related: label-out-of-range
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


torch.manual_seed(0)
model = Classifier(NUM_CLASSES)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(320, 32)
y = torch.multinomial(torch.tensor([0.3, 0.3, 0.2, 0.18, 0.02]), 320, replacement=True)
for i in range(0, 320, 32):
    print(f"batch {i // 32}: loss {train_step(model, optimizer, x[i : i + 32], y[i : i + 32]):.4f}")
