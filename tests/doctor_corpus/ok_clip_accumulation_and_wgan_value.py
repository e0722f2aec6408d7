# Two correct clipping patterns in one script: gradient accumulation that clips once
# per optimizer step (after the last micro-batch's backward), and a WGAN-style critic
# whose gradients are clipped by value after its backward, before its step.
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 3))
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
x = torch.randn(768, 12)
y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
accum = 4
for step, i in enumerate(range(0, 768, 16)):
    loss = nn.functional.cross_entropy(model(x[i : i + 16]), y[i : i + 16]) / accum
    loss.backward()
    if (step + 1) % accum == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
print("classifier loss", loss.item() * accum)

critic = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1))
gen = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
opt_c = torch.optim.RMSprop(critic.parameters(), lr=5e-4)
opt_g = torch.optim.RMSprop(gen.parameters(), lr=5e-4)
for it in range(30):
    real = torch.randn(32, 2) * 0.3 + 1.0
    fake = gen(torch.randn(32, 4))
    opt_c.zero_grad()
    loss_c = critic(fake.detach()).mean() - critic(real).mean()
    loss_c.backward()
    torch.nn.utils.clip_grad_value_(critic.parameters(), 0.5)
    opt_c.step()
    opt_g.zero_grad()
    loss_g = -critic(fake).mean()
    loss_g.backward()
    opt_g.step()
print("critic", loss_c.item(), "gen", loss_g.item())
