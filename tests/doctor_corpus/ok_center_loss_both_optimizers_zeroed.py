# Center loss (after KaiyangZhou/pytorch-center-loss main.py, cut down in size): the
# centers are parameters of the loss module with their own SGD optimizer; both
# optimizers are zeroed every step. Correct.
import torch
import torch.nn as nn
import torch.nn.functional as F


class CenterLoss(nn.Module):
    def __init__(self, num_classes=10, feat_dim=2):
        super().__init__()
        self.centers = nn.Parameter(torch.randn(num_classes, feat_dim))

    def forward(self, x, labels):
        centers = self.centers[labels]
        return ((x - centers) ** 2).sum(1).clamp(min=1e-12, max=1e12).mean()


class ConvNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.PReLU(), nn.MaxPool2d(2))
        self.fc1 = nn.Linear(8 * 4 * 4, 2)
        self.fc2 = nn.Linear(2, num_classes)

    def forward(self, x):
        features = self.fc1(torch.flatten(self.conv(x), 1))
        return features, self.fc2(F.prelu(features, torch.tensor([0.25])))


torch.manual_seed(1)
weight_cent = 1.0
model = ConvNet()
criterion_xent = nn.CrossEntropyLoss()
criterion_cent = CenterLoss(num_classes=10, feat_dim=2)
optimizer_model = torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=5e-04, momentum=0.9)
optimizer_centloss = torch.optim.SGD(criterion_cent.parameters(), lr=0.5)
data_all = torch.randn(480, 1, 8, 8)
labels_all = torch.arange(480) % 10
for epoch in range(2):
    for batch_idx in range(0, 480, 32):
        data, labels = data_all[batch_idx:batch_idx + 32], labels_all[batch_idx:batch_idx + 32]
        features, outputs = model(data)
        loss_xent = criterion_xent(outputs, labels)
        loss_cent = criterion_cent(features, labels)
        loss_cent *= weight_cent
        loss = loss_xent + loss_cent
        optimizer_model.zero_grad()
        optimizer_centloss.zero_grad()
        loss.backward()
        optimizer_model.step()
        # by doing so, weight_cent would not impact on the learning of centers
        for param in criterion_cent.parameters():
            param.grad.data *= (1. / weight_cent)
        optimizer_centloss.step()
