import torch
from _common import batches, net

model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = torch.nn.CrossEntropyLoss()
data = batches()
val_losses = []
for epoch in range(4):
    model.train()
    for x, y in data[:30]:
        opt.zero_grad()
        criterion(model(x), y).backward()
        opt.step()
    model.eval()
    for x, y in data[30:]:
        out = model(x)  # expect: eval-builds-graph
        val_loss = criterion(out, y)  # expect-related: graph-retained
        val_losses.append(val_loss)  # expect: graph-retained
    print("val", sum(v.item() for v in val_losses[-10:]) / 10)
