# One device, no wrapper: the model is moved once and every batch follows it.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
torch.manual_seed(3)
x = torch.randn(640, 20)
y = (x[:, :5].sum(1) > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(20, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 2))
model = model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
for epoch in range(3):
    model.train()
    correct = 0
    for xb, yb in loader:
        xb, yb = xb.to(device), yb.to(device)
        logits = model(xb)
        loss = nn.functional.cross_entropy(logits, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        correct += (logits.argmax(1) == yb).sum().item()
    print(f"epoch {epoch}: train acc {correct / len(x):.3f}")
