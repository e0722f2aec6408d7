# Field corpus: parameter-efficient fine-tuning as LoRA write-ups do it (a "pretrained"
# model frozen with requires_grad_(False), LoRA adapters A/B added around its linear
# layers, only the trainable parameters given to AdamW, the frozen base left in train mode
# for its dropout, and a masked language-model style loss with ignore_index=-100).
# source: pattern of https://github.com/microsoft/LoRA (loralib) and the HF PEFT quicktour
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
V, D, T = 40, 32, 12


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r=4, alpha=8):
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(torch.zeros(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.ff1 = nn.Linear(D, 64)
        self.drop = nn.Dropout(0.1)
        self.ff2 = nn.Linear(64, D)
        self.head = nn.Linear(D, V)

    def forward(self, ids):
        h = self.emb(ids)
        h = h + self.ff2(self.drop(F.gelu(self.ff1(h))))
        return self.head(h)


model = TinyLM()
model.requires_grad_(False)
model.ff1 = LoRALinear(model.ff1)
model.ff2 = LoRALinear(model.ff2)
trainable = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(trainable, lr=5e-3)
print(f"trainable {sum(p.numel() for p in trainable)} of {sum(p.numel() for p in model.parameters())}")

for step in range(60):
    ids = torch.randint(0, V, (16, T))
    labels = ids.roll(-1, dims=1)
    labels[:, -1] = -100
    mask = torch.rand(16, T) < 0.15
    labels[mask] = -100
    logits = model(ids)
    loss = F.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 20 == 0:
        print(f"step {step}: loss {loss.item():.3f}")
