# A tabular classifier configured from a dict whose "num_classes" is 9 while the data
# holds 10 classes (0..9); the model is an nn.Sequential built in the script.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

config = {
    "in_features": 20,
    "hidden": 64,
    "num_classes": 9,  # expect-related: label-out-of-range
    "lr": 1e-3,
    "batch_size": 50,
}

torch.manual_seed(0)
X = torch.randn(500, config["in_features"])
y = torch.randint(0, 10, (500,))
loader = DataLoader(TensorDataset(X, y), batch_size=config["batch_size"], shuffle=True)
model = nn.Sequential(
    nn.Linear(config["in_features"], config["hidden"]),
    nn.ReLU(),
    nn.Dropout(0.1),
    nn.Linear(config["hidden"], config["num_classes"]),  # expect: label-out-of-range
)
optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
loss_fn = nn.CrossEntropyLoss()
for epoch in range(3):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)  # expect-related: label-out-of-range
        loss.backward()
        optimizer.step()
