# A binary classifier with one logit, trained with nn.CrossEntropyLoss on 0/1 float targets:
# a softmax over one logit is 1, the loss is 0 and nothing trains.
import torch
from torch import nn

torch.manual_seed(0)
features = torch.randn(1024, 12)
labels = (features[:, :3].sum(1) > 0).float()

classifier = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 1))
criterion = nn.CrossEntropyLoss()
opt = torch.optim.Adam(classifier.parameters(), lr=3e-3)

for epoch in range(4):
    perm = torch.randperm(len(features))
    for i in range(0, len(features), 64):
        idx = perm[i:i + 64]
        logits = classifier(features[idx])
        loss = criterion(logits, labels[idx].unsqueeze(1))  # expect: loss-no-gradient
        opt.zero_grad()
        loss.backward()  # expect-related: loss-no-gradient
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
