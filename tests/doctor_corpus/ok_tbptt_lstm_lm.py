# A character-level LSTM language model trained with truncated backpropagation through
# time: the hidden state is carried from chunk to chunk but detached at each chunk so
# that backward stops at the chunk boundary.
import torch
from torch import nn

text = "the quick brown fox jumps over the lazy dog. " * 40
vocab = sorted(set(text))
data = torch.tensor([vocab.index(c) for c in text])


class CharLSTM(nn.Module):
    def __init__(self, n_vocab, dim=32):
        super().__init__()
        self.embed = nn.Embedding(n_vocab, dim)
        self.lstm = nn.LSTM(dim, dim, batch_first=True)
        self.out = nn.Linear(dim, n_vocab)

    def forward(self, x, state=None):
        h, state = self.lstm(self.embed(x), state)
        return self.out(h), state


torch.manual_seed(0)
model = CharLSTM(len(vocab))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
batch, bptt = 4, 25
streams = data[: len(data) // batch * batch].view(batch, -1)
for epoch in range(2):
    state = None
    for i in range(0, streams.size(1) - 1 - bptt, bptt):
        inp, tgt = streams[:, i : i + bptt], streams[:, i + 1 : i + 1 + bptt]
        if state is not None:
            state = tuple(s.detach() for s in state)
        logits, state = model(inp, state)
        loss = nn.functional.cross_entropy(logits.reshape(-1, len(vocab)), tgt.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
