# Training-set predictions turned into NumPy the safe way: .detach().cpu().numpy().
import numpy as np
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(450, 4)
y = torch.bucketize(x[:, 0].contiguous(), torch.tensor([-0.5, 0.5]))
model = nn.Sequential(nn.Linear(4, 24), nn.ReLU(), nn.Linear(24, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    preds = []
    for i in range(0, 450, 45):
        logits = model(x[i : i + 45])
        loss = nn.functional.cross_entropy(logits, y[i : i + 45])
        opt.zero_grad()
        loss.backward()
        opt.step()
        preds.append(logits.argmax(1).detach().cpu().numpy())
    matrix = np.zeros((3, 3), dtype=int)
    np.add.at(matrix, (y.numpy(), np.concatenate(preds)), 1)
    print(f"epoch {epoch}: diagonal {np.trace(matrix) / matrix.sum():.3f}")
