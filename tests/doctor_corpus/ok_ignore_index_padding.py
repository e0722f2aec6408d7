# Token tagging over padded sentences: padding positions carry the label -100, which
# CrossEntropyLoss ignores (its default ignore_index).
import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

PAD_LABEL = -100
N_TAGS = 4


class Tagger(nn.Module):
    def __init__(self, vocab=50, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.out = nn.Linear(dim, N_TAGS)

    def forward(self, tokens):
        h, _ = self.rnn(self.embed(tokens))
        return self.out(h)


torch.manual_seed(0)
sentences = [torch.randint(1, 50, (int(n),)) for n in torch.randint(3, 12, (256,))]
tags = [s % N_TAGS for s in sentences]
model = Tagger()
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
criterion = nn.CrossEntropyLoss(ignore_index=PAD_LABEL)
for epoch in range(2):
    for i in range(0, 256, 32):
        tokens = pad_sequence(sentences[i : i + 32], batch_first=True, padding_value=0)
        target = pad_sequence(tags[i : i + 32], batch_first=True, padding_value=PAD_LABEL)
        logits = model(tokens)
        loss = criterion(logits.reshape(-1, N_TAGS), target.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
