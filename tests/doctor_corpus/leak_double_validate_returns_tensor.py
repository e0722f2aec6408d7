import torch
from _common import batches, net


def validate(model, data, loss_fn):
    model.eval()
    total = 0
    for x, y in data:
        total = total + loss_fn(model(x), y)  # expect: eval-builds-graph
    return total / len(data)


model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
data = batches(n=36)
val_curve = []
for epoch in range(5):
    model.train()
    for x, y in data[:28]:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    val_curve.append(validate(model, data[28:], loss_fn))  # expect: graph-retained
    print(f"epoch {epoch}: val {val_curve[-1].item():.3f}")
