# A quick smoke run of a transformer-style setup: 25 steps, all inside a 500-step linear
# warmup, so the learning rate is still tiny and the loss has barely moved. Expected.
import torch
from torch import nn

torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
model = nn.Sequential(nn.Embedding(100, 32), nn.TransformerEncoder(layer, num_layers=1))
head = nn.Linear(32, 100)
params = [*model.parameters(), *head.parameters()]
optimizer = torch.optim.AdamW(params, lr=5e-4, weight_decay=0.01)
warmup_steps = 500
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup_steps))
for step in range(25):
    tokens = torch.randint(0, 100, (16, 12))
    logits = head(model(tokens[:, :-1]))
    loss = nn.functional.cross_entropy(logits.reshape(-1, 100), tokens[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    scheduler.step()
    if step % 5 == 0:
        print(f"step {step}: loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
