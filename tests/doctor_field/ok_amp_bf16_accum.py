# Field corpus: a mixed-precision training loop as the AMP recipe and the HF "custom loop"
# guides write it, on the CPU with bf16 autocast (no GradScaler needed for bf16), gradient
# accumulation over 4 micro-batches with the loss divided, a linear warmup + decay
# LambdaLR stepped per optimizer step, clipping, and evaluation under inference_mode.
# source: pattern of https://pytorch.org/tutorials/recipes/recipes/amp_recipe.html and
# https://huggingface.co/docs/transformers/training#train-in-native-pytorch
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
g = torch.Generator().manual_seed(1)
x = torch.randn(1024, 32, generator=g)
y = (x @ torch.randn(32, generator=g) > 0).long()
train_dl = DataLoader(TensorDataset(x[:896], y[:896]), batch_size=16, shuffle=True)
eval_dl = DataLoader(TensorDataset(x[896:], y[896:]), batch_size=64)

model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
accum = 4
num_epochs = 2
num_training_steps = num_epochs * len(train_dl) // accum
warmup = num_training_steps // 10


def lr_lambda(step):
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (num_training_steps - step) / max(1, num_training_steps - warmup))


lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
for epoch in range(num_epochs):
    model.train()
    for i, (xb, yb) in enumerate(train_dl):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(xb)
            loss = nn.functional.cross_entropy(logits, yb)
        (loss / accum).backward()
        if (i + 1) % accum == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
    model.eval()
    correct = 0
    with torch.inference_mode():
        for xb, yb in eval_dl:
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                correct += (model(xb).argmax(-1) == yb).sum().item()
    print(f"epoch {epoch}: accuracy {correct / 128:.3f}, lr {lr_scheduler.get_last_lr()[0]:.5f}")
