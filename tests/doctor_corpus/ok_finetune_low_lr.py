# (review script) written to the doctor's spec; expected: none
# Fine-tuning a "pretrained" classifier (a checkpoint close to the task's best model) on
# new data from the same source with a low learning rate, as one does to adapt a model
# without forgetting: the loss starts near its floor (noisy labels) and only polishes.
import io

import torch
import torch.nn.functional as F
from torch import nn


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    logits = x[:, :4] * 2.0
    y = torch.multinomial(torch.softmax(logits, 1), 1, generator=g).squeeze(1)  # noisy labels
    return x, y


def build():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


# The checkpoint, as torch.load("pretrained.pt") would give it (made elsewhere).
torch.manual_seed(0)
w1 = torch.zeros(32, 16)
w1[:4, :4], w1[4:8, :4] = torch.eye(4), -torch.eye(4)
w2 = torch.zeros(4, 32)
w2[:, :4], w2[:, 4:8] = 2 * torch.eye(4), -2 * torch.eye(4)
state = {"0.weight": w1 + 0.01 * torch.randn(32, 16), "0.bias": torch.zeros(32),
         "2.weight": w2 + 0.01 * torch.randn(4, 32), "2.bias": torch.zeros(4)}
buf = io.BytesIO()
torch.save(state, buf)
buf.seek(0)

model = build()
model.load_state_dict(torch.load(buf))
x, y = make_data(3200, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
for epoch in range(5):
    for i in range(0, 3200, 64):
        loss = F.cross_entropy(model(x[i : i + 64]), y[i : i + 64])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"fine-tune epoch {epoch} loss {loss.item():.4f}")
