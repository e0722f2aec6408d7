# The gradients are cleared between backward and step, so the optimizer never sees them.
import torch
from torch import nn


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 8, kernel_size=5, padding=2)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.conv(x.unsqueeze(1)))
        return self.fc(h.mean(-1))


def train_epoch(model, optimizer, data):
    for signal, label in data:
        logits = model(signal)
        loss = nn.functional.cross_entropy(logits, label)
        loss.backward()  # expect-related: step-before-backward
        optimizer.zero_grad()
        optimizer.step()  # expect: step-before-backward
    return loss.item()


torch.manual_seed(0)
t = torch.linspace(0, 6.28, 32)
labels = torch.randint(0, 3, (480,))
signals = torch.sin(t * (labels.float().unsqueeze(1) + 1)) + 0.3 * torch.randn(480, 32)
data = [(signals[i : i + 24], labels[i : i + 24]) for i in range(0, 480, 24)]
model = ConvNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for epoch in range(3):
    print(f"epoch {epoch}: loss {train_epoch(model, optimizer, data):.4f}")
