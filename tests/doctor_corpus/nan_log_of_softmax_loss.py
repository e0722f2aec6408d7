# A classifier whose forward returns probabilities, trained with a hand-written
# cross-entropy. Once the model is confident, a probability underflows to exactly 0.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
centers = torch.randn(4, 10) * 3
labels = torch.randint(0, 4, (512,))
features = centers[labels] + 0.3 * torch.randn(512, 10)
loader = DataLoader(TensorDataset(features, labels), batch_size=64, shuffle=True)

model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 4), nn.Softmax(dim=1))
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)


def cross_entropy(probs, target):
    onehot = nn.functional.one_hot(target, probs.shape[1]).float()
    return -(onehot * torch.log(probs)).sum(dim=1).mean()  # expect: nonfinite-loss


for epoch in range(6):
    for xb, yb in loader:
        probs = model(xb)
        loss = cross_entropy(probs, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
