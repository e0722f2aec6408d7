# Lightning-1.x style: every training step returns a dict that is collected for an
# epoch-end hook; the dict holds the loss and logits with their graphs.
import torch
from torch import nn
from _common import batches, net

model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def training_step(batch):
    x, y = batch
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    return {"loss": loss, "logits": logits, "y": y}


def training_epoch_end(outputs):
    loss = torch.stack([o["loss"] for o in outputs]).mean().item()
    acc = torch.cat([(o["logits"].argmax(1) == o["y"]) for o in outputs]).float().mean().item()
    print(f"loss {loss:.3f} acc {acc:.3f}")


for epoch in range(2):
    outputs = []
    for batch in batches():
        out = training_step(batch)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
        outputs.append(out)  # expect: graph-retained
    training_epoch_end(outputs)
