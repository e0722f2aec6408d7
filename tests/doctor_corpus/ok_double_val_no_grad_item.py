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
    with torch.no_grad():
        for x, y in data[30:]:
            out = model(x)
            val_loss = criterion(out, y)
            val_losses.append(val_loss.item())
    print("val", sum(val_losses[-10:]) / 10)
