import torch
import torch.nn as nn

torch.manual_seed(0)
x = torch.randn(512, 20)
y = (x[:, 0] > 0).long()
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
history = {"loss": [], "acc": []}
for epoch in range(3):
    model.train()
    for i in range(0, 384, 32):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x[i : i + 32]), y[i : i + 32])  # expect-related: graph-retained
        loss.backward()
        opt.step()
        history["loss"].append(loss)  # expect: graph-retained
    model.eval()
    acc = 0
    for i in range(384, 512, 32):
        acc += (model(x[i : i + 32]).argmax(1) == y[i : i + 32]).float().mean()  # expect: eval-builds-graph
    history["acc"].append(acc / 4)
