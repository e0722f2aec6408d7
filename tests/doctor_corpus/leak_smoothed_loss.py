# An exponentially smoothed loss for the progress print, kept as a tensor.
import torch
from _common import batches, net

model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
smooth_loss = None
for epoch in range(2):
    for step, (x, y) in enumerate(batches()):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)  # expect-related: graph-retained
        loss.backward()
        opt.step()
        smooth_loss = loss if smooth_loss is None else 0.98 * smooth_loss + 0.02 * loss  # expect: graph-retained
        if step % 10 == 0:
            print(f"epoch {epoch} step {step} loss {smooth_loss.item():.3f}")
