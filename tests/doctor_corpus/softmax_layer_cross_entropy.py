# The model ends in nn.Softmax and is trained with CrossEntropyLoss, which applies its
# own log-softmax: the loss sees probabilities as logits and its gradients are squashed.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class MLPClassifier(nn.Module):
    def __init__(self, d_in, n_classes):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(d_in, 64), nn.ReLU(), nn.Linear(64, n_classes), nn.Softmax(dim=1)
        )

    def forward(self, x):
        return self.layers(x)


torch.manual_seed(0)
centers = 2 * torch.randn(6, 16)
labels = torch.randint(0, 6, (600,))
data = TensorDataset(centers[labels] + torch.randn(600, 16), labels)
loader = DataLoader(data, batch_size=50, shuffle=True)
model = MLPClassifier(16, 6)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    for xb, yb in loader:
        probs = model(xb)
        loss = criterion(probs, yb)  # expect: softmax-before-loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
