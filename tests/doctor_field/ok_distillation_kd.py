# Field corpus: knowledge distillation in the shape of the PyTorch "knowledge distillation"
# tutorial (a teacher trained first, then frozen in eval mode and run under no_grad; a
# student trained on soft targets with KL divergence at temperature T plus the hard-label
# cross-entropy; a test() under no_grad for both).
# source: https://pytorch.org/tutorials/beginner/knowledge_distillation_tutorial.html
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(42)
g = torch.Generator().manual_seed(0)
x = torch.randn(768, 16, generator=g)
y = (x[:, :4].sum(1) > 0).long() + (x[:, 4] > 1).long()
train_loader = DataLoader(TensorDataset(x[:640], y[:640]), batch_size=64, shuffle=True)
test_loader = DataLoader(TensorDataset(x[640:], y[640:]), batch_size=64, shuffle=False)


class DeepNN(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1),
                                      nn.Linear(64, 64), nn.ReLU())
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x))


class LightNN(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, num_classes))

    def forward(self, x):
        return self.net(x)


def train(model, train_loader, epochs, learning_rate):
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=learning_rate)
    model.train()
    for epoch in range(epochs):
        running_loss = 0.0
        for inputs, labels in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(inputs), labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()


def test(model, test_loader):
    model.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for inputs, labels in test_loader:
            _, predicted = torch.max(model(inputs), 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
    return 100 * correct / total


def train_knowledge_distillation(teacher, student, train_loader, epochs, learning_rate, T,
                                 soft_target_loss_weight, ce_loss_weight):
    ce_loss = nn.CrossEntropyLoss()
    optimizer = optim.Adam(student.parameters(), lr=learning_rate)
    teacher.eval()
    student.train()
    for epoch in range(epochs):
        for inputs, labels in train_loader:
            optimizer.zero_grad()
            with torch.no_grad():
                teacher_logits = teacher(inputs)
            student_logits = student(inputs)
            soft_targets = F.softmax(teacher_logits / T, dim=-1)
            soft_prob = F.log_softmax(student_logits / T, dim=-1)
            soft_targets_loss = torch.sum(soft_targets * (soft_targets.log() - soft_prob)) \
                / soft_prob.size()[0] * (T**2)
            label_loss = ce_loss(student_logits, labels)
            loss = soft_target_loss_weight * soft_targets_loss + ce_loss_weight * label_loss
            loss.backward()
            optimizer.step()


teacher = DeepNN()
train(teacher, train_loader, epochs=3, learning_rate=1e-3)
print(f"teacher accuracy {test(teacher, test_loader):.1f}%")
student = LightNN()
train_knowledge_distillation(teacher, student, train_loader, epochs=3, learning_rate=1e-3, T=2,
                             soft_target_loss_weight=0.25, ce_loss_weight=0.75)
print(f"student accuracy {test(student, test_loader):.1f}%")
