# (review script) written to the doctor's spec; expected: nonfinite-loss@10
# A classifier on raw 0..255 pixel intensities with a hand-written temperature-scaled
# softmax cross-entropy: exp() of the large logits overflows to inf, and inf / inf = NaN.
import torch
from torch import nn


def softmax_cross_entropy(logits, target, temperature=0.5):
    logits = logits / temperature
    e = torch.exp(logits)  # expect: nonfinite-loss
    probs = e / e.sum(dim=1, keepdim=True)
    picked = probs[torch.arange(target.size(0)), target]
    return -torch.log(picked).mean()


torch.manual_seed(0)
images = torch.randint(0, 256, (512, 64), dtype=torch.uint8)
labels = (images[:, :32].float().mean(1) > images[:, 32:].float().mean(1)).long()
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for epoch in range(2):
    for i in range(0, 512, 64):
        xb, yb = images[i : i + 64].float(), labels[i : i + 64]
        out = model(xb)
        loss = softmax_cross_entropy(out, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item()}")
