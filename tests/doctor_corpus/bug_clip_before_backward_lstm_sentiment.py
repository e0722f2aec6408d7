# An LSTM sentiment classifier (the classic RNN recipe: clip the gradient norm), with
# the clip placed before loss.backward(): it clips the cleared gradients, i.e. nothing.
import torch
from torch import nn

torch.manual_seed(0)
VOCAB, SEQ = 200, 20


class SentimentLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.lstm = nn.LSTM(32, 48, batch_first=True)
        self.out = nn.Linear(48, 1)

    def forward(self, tokens):
        _, (h, _) = self.lstm(self.embed(tokens))
        return self.out(h[-1]).squeeze(1)


tokens = torch.randint(0, VOCAB, (480, SEQ))
labels = (tokens[:, :5] < VOCAB // 2).float().mean(1).round()
model = SentimentLSTM()
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
criterion = nn.BCEWithLogitsLoss()

for epoch in range(2):
    for i in range(0, len(tokens), 32):
        optimizer.zero_grad()
        logits = model(tokens[i : i + 32])
        loss = criterion(logits, labels[i : i + 32])
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)  # expect: clip-before-backward
        loss.backward()  # expect-related: clip-before-backward
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
