# An auxiliary head defined for a loss that was later dropped: it is in the optimizer
# (model.parameters()) but never used in forward, so it never gets a gradient.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class TextCNN(nn.Module):
    def __init__(self, vocab=100, dim=16, n_classes=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.conv = nn.Conv1d(dim, 32, kernel_size=3, padding=1)
        self.classifier = nn.Linear(32, n_classes)
        self.aux = nn.Linear(32, vocab)  # expect: param-without-grad

    def forward(self, tokens):
        h = torch.relu(self.conv(self.embed(tokens).transpose(1, 2)))
        return self.classifier(h.max(dim=2).values)


torch.manual_seed(0)
tokens = torch.randint(0, 100, (480, 20))
labels = (tokens < 10).any(dim=1).long()
loader = DataLoader(TensorDataset(tokens, labels), batch_size=32, shuffle=True)
model = TextCNN()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(2):
    for tb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(tb), yb)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
