# (review script) written to the doctor's spec; expected: none  (a shape bug: logits need .transpose(1, 2); not label-out-of-range)
# A next-character model whose logits are (batch, time, vocab) handed to cross_entropy
# with (batch, time) targets: cross_entropy wants the classes in dim 1, so it reads the
# time axis as the classes. (A shape bug, not a label bug.)
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
text = "the quick brown fox jumps over the lazy dog " * 40
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text])
block, vocab = 12, len(chars)


class CharRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(vocab, 32)
        self.rnn = nn.GRU(32, 64, batch_first=True)
        self.out = nn.Linear(64, vocab)

    def forward(self, idx):
        h, _ = self.rnn(self.emb(idx))
        return self.out(h)  # (B, T, vocab)


model = CharRNN()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(100):
    ix = torch.randint(0, len(data) - block - 1, (16,))
    xb = torch.stack([data[i : i + block] for i in ix])
    yb = torch.stack([data[i + 1 : i + block + 1] for i in ix])
    logits = model(xb)
    loss = F.cross_entropy(logits, yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("loss", loss.item())
