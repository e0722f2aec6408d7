# The twin of nograd_loss_crossentropy_module_binary_head: one logit with
# BCEWithLogitsLoss on float targets.
import torch
from torch import nn

torch.manual_seed(0)
features = torch.randn(1024, 12)
labels = (features[:, :3].sum(1) > 0).float()

classifier = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 1))
criterion = nn.BCEWithLogitsLoss()
opt = torch.optim.Adam(classifier.parameters(), lr=3e-3)

for epoch in range(4):
    perm = torch.randperm(len(features))
    for i in range(0, len(features), 64):
        idx = perm[i:i + 64]
        logits = classifier(features[idx])
        loss = criterion(logits.squeeze(1), labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
