# 8x8 grayscale "digits" fed as raw 0..255 pixel values to a linear classifier: the
# first logits are in the hundreds and the first loss is far above ln(10).
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
templates = torch.randint(0, 256, (10, 64)).float()
labels = torch.randint(0, 10, (640,))
pixels = (templates[labels] + 40 * torch.randn(640, 64)).clamp(0, 255)

model = nn.Linear(64, 10)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-5)
for epoch in range(2):
    for i in range(0, 640, 64):
        logits = model(pixels[i : i + 64])
        loss = F.cross_entropy(logits, labels[i : i + 64])  # expect: loss-at-init
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.2f}")
