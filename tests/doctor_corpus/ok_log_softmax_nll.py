# The classic MNIST-example style: the network returns log_softmax and is trained with
# nll_loss (together, exactly cross-entropy).
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)
        self.fc1 = nn.Linear(8 * 5 * 5, 32)
        self.dropout = nn.Dropout(0.25)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = self.dropout(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)


torch.manual_seed(0)
target = torch.randint(0, 3, (240,))
data = torch.randn(240, 1, 12, 12)
data[:, :, :4] += (target == 1).float().view(-1, 1, 1, 1)
data[:, :, 8:] += (target == 2).float().view(-1, 1, 1, 1)
model = Net()
optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
model.train()
for epoch in range(3):
    for i in range(0, 240, 24):
        optimizer.zero_grad()
        output = model(data[i : i + 24])
        loss = F.nll_loss(output, target[i : i + 24])
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
