# Predictions kept on the device every step. The meta device stands in for CUDA here
# (this corpus runs on CPU-only machines): a tensor on any accelerator counts the same.
import torch
from _common import batches, net

model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
all_preds = []
for x, y in batches():
    opt.zero_grad()
    out = model(x)
    torch.nn.functional.cross_entropy(out, y).backward()
    opt.step()
    all_preds.append(out.detach().to("meta"))  # expect: tensor-accumulation
