# A text CNN with an auxiliary head that is really used: its loss (predicting the
# first token) is added to the classification loss, so every parameter gets a gradient.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class TextCNN(nn.Module):
    def __init__(self, vocab=100, dim=16, n_classes=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.conv = nn.Conv1d(dim, 32, kernel_size=3, padding=1)
        self.classifier = nn.Linear(32, n_classes)
        self.aux = nn.Linear(32, vocab)

    def forward(self, tokens):
        h = torch.relu(self.conv(self.embed(tokens).transpose(1, 2)))
        pooled = h.max(dim=2).values
        return self.classifier(pooled), self.aux(h[:, :, 0])


torch.manual_seed(0)
tokens = torch.randint(0, 100, (480, 20))
labels = (tokens < 10).any(dim=1).long()
loader = DataLoader(TensorDataset(tokens, labels), batch_size=32, shuffle=True)
model = TextCNN()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(2):
    for tb, yb in loader:
        optimizer.zero_grad()
        logits, aux_logits = model(tb)
        loss = nn.functional.cross_entropy(logits, yb)
        loss = loss + 0.1 * nn.functional.cross_entropy(aux_logits, tb[:, 0])
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
