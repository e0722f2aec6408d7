# (review script) written to the doctor's spec; expected: nonfinite-loss@59
# A nanoGPT-style causal self-attention LM (the causal mask filled with -inf, as in
# nanoGPT) trained on padded lines; the loss is the per-line mean token loss. One line
# of the corpus is empty, so its token count is 0 and 0 / 0 = NaN.
import torch
import torch.nn.functional as F
from torch import nn

PAD, V, T = 0, 30, 12


class CausalSelfAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, T, T))

    def forward(self, x):
        B, L, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / C**0.5)
        att = att.masked_fill(self.bias[:, :L, :L] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        return self.c_proj(att @ v)


class TinyGPT(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.wte = nn.Embedding(V, d)
        self.wpe = nn.Embedding(T, d)
        self.ln = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d)
        self.head = nn.Linear(d, V)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        x = x + self.attn(self.ln(x))
        return self.head(x)


torch.manual_seed(0)
lines = []
for i in range(96):
    n = 0 if i == 50 else int(torch.randint(3, T + 1, ()))
    seq = torch.full((T + 1,), PAD)
    seq[:n] = torch.randint(1, V, (n,))
    lines.append(seq)
data = torch.stack(lines)
model = TinyGPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
for epoch in range(2):
    for i in range(0, 96, 8):
        xb, yb = data[i : i + 8, :-1], data[i : i + 8, 1:]
        logits = model(xb)
        tok = F.cross_entropy(logits.transpose(1, 2), yb, ignore_index=PAD, reduction="none")
        mask = (yb != PAD).float()
        loss = ((tok * mask).sum(1) / mask.sum(1)).mean()  # expect: nonfinite-loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
