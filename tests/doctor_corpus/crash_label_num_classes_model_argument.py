# A ResNet-style classifier for 10 classes built as `ResNetSmall(num_classes=9)`: the
# argument overrides the right default, and a batch holding label 9 crashes the loss.
import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + x)


class ResNetSmall(nn.Module):
    def __init__(self, num_classes=10, width=8):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = BasicBlock(width)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, num_classes)  # expect: label-out-of-range

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layer1(self.stem(x))), 1))


torch.manual_seed(0)
net = ResNetSmall(num_classes=9)  # expect-related: label-out-of-range
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
inputs_all = torch.randn(256, 3, 8, 8)
targets_all = torch.randint(0, 10, (256,))
for epoch in range(2):
    for i in range(0, 256, 32):
        inputs, targets = inputs_all[i:i + 32], targets_all[i:i + 32]
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, targets)  # expect-related: label-out-of-range
        loss.backward()
        optimizer.step()
