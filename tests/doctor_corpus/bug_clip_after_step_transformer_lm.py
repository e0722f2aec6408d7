# A tiny character-level transformer LM whose training step clips after
# optimizer.step(): the step already applied the unclipped gradients.
import torch
from torch import nn
from torch.nn.utils import clip_grad_norm_

torch.manual_seed(0)
text = "hello world, this is a tiny corpus for a tiny transformer. " * 40
chars = sorted(set(text))
data = torch.tensor([chars.index(c) for c in text])
block, vocab = 16, len(chars)


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(vocab, 32)
        self.pos = nn.Embedding(block, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(32, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1])
        return self.head(self.blocks(x, mask=mask, is_causal=True))


model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)


def get_batch(bs=16):
    ix = torch.randint(len(data) - block - 1, (bs,))
    x = torch.stack([data[i : i + block] for i in ix])
    y = torch.stack([data[i + 1 : i + block + 1] for i in ix])
    return x, y


for it in range(25):
    xb, yb = get_batch()
    logits = model(xb)
    loss = nn.functional.cross_entropy(logits.view(-1, vocab), yb.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()  # expect-related: clip-before-backward
    clip_grad_norm_(model.parameters(), 1.0)  # expect: clip-before-backward
    if it % 5 == 0:
        print(f"iter {it}: loss {loss.item():.3f}")
