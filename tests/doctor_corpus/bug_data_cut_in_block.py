# EXPECT: param-without-grad@18
# A residual block whose forward reads `.data` of its attention output (a leftover
# from debugging NaNs): the attention's weights are in the optimizer but never get a
# gradient.
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        a, _ = self.attn(x, x, x, need_weights=False)
        x = self.norm(x + a.data)  # expect: param-without-grad
        return x + self.mlp(x)


class Encoder(nn.Module):
    def __init__(self, d=16, n_classes=3):
        super().__init__()
        self.inp = nn.Linear(4, d)
        self.block = Block(d)
        self.out = nn.Linear(d, n_classes)

    def forward(self, x):
        return self.out(self.block(self.inp(x)).mean(1))


torch.manual_seed(0)
model = Encoder()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
seqs, labels = torch.randn(256, 6, 4), torch.randint(0, 3, (256,))
for epoch in range(4):
    for i in range(0, 256, 32):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(seqs[i : i + 32]), labels[i : i + 32])
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
