# EXPECT: missing-zero-grad@21
# A Trainer whose train_step clips the gradient norm before stepping but never clears
# the gradients: every step clips (and applies) the running sum of all gradients so far.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, lr=1e-2, max_norm=1.0):
        self.model = model
        self.max_norm = max_norm
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()

    def train_step(self, batch):
        inputs, targets = batch
        loss = self.loss_fn(self.model(inputs), targets)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
        self.optimizer.step()  # expect: missing-zero-grad
        return loss.detach()

    def fit(self, loader, epochs=2):
        self.model.train()
        for epoch in range(epochs):
            losses = torch.stack([self.train_step(b) for b in loader])
            print(f"epoch {epoch}: mean loss {losses.mean().item():.4f}")


torch.manual_seed(0)
x = torch.randn(640, 20)
y = (x[:, :3].sum(1) > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
Trainer(model).fit(loader)
