# A "pretrained" feature extractor is loaded and put in eval mode, then fine-tuned with
# the head: its dropout is off and its batch norm never adapts to the new data while
# its weights are being trained.
import torch
from torch import nn


def load_backbone():
    torch.manual_seed(0)
    backbone = nn.Sequential(
        nn.Conv1d(2, 16, 5, padding=2), nn.BatchNorm1d(16), nn.ReLU(),
        nn.Conv1d(16, 16, 5, padding=2), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3),
        nn.AdaptiveAvgPool1d(1), nn.Flatten(),
    )
    return backbone


backbone = load_backbone()
backbone.eval()  # expect: eval-mode-in-train
head = nn.Linear(16, 4)
optimizer = torch.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.05, momentum=0.9)

torch.manual_seed(1)
signals = torch.randn(320, 2, 40)
labels = torch.randint(0, 4, (320,))
signals[:, 0] += labels.float().unsqueeze(1)
for epoch in range(3):
    for i in range(0, 320, 32):
        xb, yb = signals[i : i + 32], labels[i : i + 32]
        loss = nn.functional.cross_entropy(head(backbone(xb)), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
