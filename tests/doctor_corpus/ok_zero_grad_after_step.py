# The gradients are cleared right after each step (and once before the loop), the
# order some codebases prefer.
import torch
from _common import batches, net

model = net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
optimizer.zero_grad()
for epoch in range(2):
    correct = 0
    for x, y in batches():
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        correct += (out.argmax(1) == y).sum().item()
    print(f"epoch {epoch}: accuracy {correct / 640:.3f}")
