# A small CNN trained in minibatches by a Trainer class; after each epoch the whole test
# set goes through the model once under inference_mode in eval mode (the twin of
# trainmode_trainer_inference_mode_test_acc).
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout2d(0.25)
        self.fc = nn.Linear(8 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(self.drop(x), 1))


class Trainer:
    def __init__(self, model, train_loader, test_images, test_labels):
        self.model = model
        self.train_loader = train_loader
        self.test_images, self.test_labels = test_images, test_labels
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def train_epoch(self):
        self.model.train()
        for images, labels in self.train_loader:
            self.optimizer.zero_grad()
            loss = F.cross_entropy(self.model(images), labels)
            loss.backward()
            self.optimizer.step()

    def test_accuracy(self):
        self.model.eval()
        with torch.inference_mode():
            logits = self.model(self.test_images)
        return (logits.argmax(1) == self.test_labels).float().mean().item()

    def fit(self, epochs):
        for epoch in range(epochs):
            self.train_epoch()
            print(f"epoch {epoch}: test accuracy {self.test_accuracy():.3f}")


torch.manual_seed(0)
images = torch.randn(512, 1, 14, 14)
labels = torch.randint(0, 10, (512,))
loader = DataLoader(TensorDataset(images[:384], labels[:384]), batch_size=64, shuffle=True)
Trainer(SmallCNN(), loader, images[384:], labels[384:]).fit(3)
