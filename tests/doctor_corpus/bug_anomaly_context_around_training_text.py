# A bag-of-embeddings text classifier whose whole training function runs inside
# torch.autograd.detect_anomaly(): debugging left in the production path.
import torch
from torch import nn

VOCAB, CLASSES = 500, 4


class TextClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.EmbeddingBag(VOCAB, 32, mode="mean")
        self.fc = nn.Linear(32, CLASSES)

    def forward(self, text, offsets):
        return self.fc(self.embedding(text, offsets))


def batches(n_batches, batch_size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n_batches):
        lengths = torch.randint(3, 12, (batch_size,), generator=g)
        text = torch.randint(0, VOCAB, (int(lengths.sum()),), generator=g)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
        labels = text[offsets] % CLASSES
        yield text, offsets, labels


def train(model, optimizer, criterion):
    with torch.autograd.detect_anomaly():  # expect: anomaly-mode-on
        for step, (text, offsets, labels) in enumerate(batches(30)):
            optimizer.zero_grad()
            loss = criterion(model(text, offsets), labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            optimizer.step()
            if step % 10 == 0:
                print(f"step {step}: loss {loss.item():.3f}")


torch.manual_seed(0)
model = TextClassifier()
train(model, torch.optim.SGD(model.parameters(), lr=5.0), nn.CrossEntropyLoss())
