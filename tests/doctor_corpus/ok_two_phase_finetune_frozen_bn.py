# (review script) expected: none
# Fine-tuning pattern from mmdetection/detectron2 (norm_eval=True / FrozenBN) and the PyTorch
# "finetuning torchvision models" tutorial: backbone BatchNorm kept in eval mode (running stats frozen,
# affine params frozen) by overriding train(); only the head is trained; two phases:
# phase 1 trains the head, phase 2 unfreezes the last block with a NEW optimizer + CosineAnnealingLR
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Backbone(nn.Module):
    def __init__(self, norm_eval=True):
        super().__init__()
        self.norm_eval = norm_eval
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(self.layer1(self.stem(x))).flatten(1)

    def train(self, mode=True):
        super().train(mode)
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()
        return self


class Classifier(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.backbone = Backbone()
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(32, num_classes))

    def forward(self, x):
        return self.head(self.backbone(x))


def set_parameter_requires_grad(model, feature_extracting):
    if feature_extracting:
        for param in model.parameters():
            param.requires_grad = False


def train_model(model, dataloaders, criterion, optimizer, scheduler, num_epochs):
    for epoch in range(num_epochs):
        for phase in ['train', 'val']:
            if phase == 'train':
                model.train()
            else:
                model.eval()
            running_loss = 0.0
            running_corrects = 0
            for inputs, labels in dataloaders[phase]:
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == 'train'):
                    outputs = model(inputs)
                    loss = criterion(outputs, labels)
                    _, preds = torch.max(outputs, 1)
                    if phase == 'train':
                        loss.backward()
                        optimizer.step()
                running_loss += loss.item() * inputs.size(0)
                running_corrects += torch.sum(preds == labels.data)
            if phase == 'train' and scheduler is not None:
                scheduler.step()
            n = len(dataloaders[phase].dataset)
            print('{} Loss: {:.4f} Acc: {:.4f}'.format(phase, running_loss / n, running_corrects.double() / n))
    return model


torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
protos = 2 * torch.randn(10, 3, 1, 1, generator=g).expand(10, 3, 16, 16)  # colour classes: survive the frozen random backbone's pooling
y = torch.randint(0, 10, (640,), generator=g)
x = protos[y] + 0.8 * torch.randn(640, 3, 16, 16, generator=g)
yv = torch.randint(0, 10, (128,), generator=g)
xv = protos[yv] + 0.8 * torch.randn(128, 3, 16, 16, generator=g)
dataloaders = {'train': DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True),
               'val': DataLoader(TensorDataset(xv, yv), batch_size=64)}
model = Classifier()
# "pretrained" backbone: give BN some running statistics first
with torch.no_grad():
    model.backbone.stem[1].running_mean.normal_(0, 0.1)
    model.backbone.layer1[1].running_mean.normal_(0, 0.1)
criterion = nn.CrossEntropyLoss()

# phase 1: feature extraction (backbone frozen)
set_parameter_requires_grad(model.backbone, True)
params_to_update = [p for p in model.parameters() if p.requires_grad]
optimizer_ft = torch.optim.SGD(params_to_update, lr=0.01, momentum=0.9)
model = train_model(model, dataloaders, criterion, optimizer_ft, None, num_epochs=3)

# phase 2: unfreeze layer1 conv (BN stays frozen), new optimizer with a cosine schedule
for p in model.backbone.layer1[0].parameters():
    p.requires_grad = True
params_to_update = [p for p in model.parameters() if p.requires_grad]
optimizer_ft = torch.optim.SGD(params_to_update, lr=0.003, momentum=0.9)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer_ft, T_max=3)
model = train_model(model, dataloaders, criterion, optimizer_ft, scheduler, num_epochs=3)
