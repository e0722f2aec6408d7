# A non-negative matrix factorisation by projected gradient: after each optimizer
# step the factors are clamped in place, under torch.no_grad(), as the recipe says.
import torch

torch.manual_seed(0)
target = torch.rand(40, 30)
W = torch.rand(40, 5, requires_grad=True)
H = torch.rand(5, 30, requires_grad=True)
optimizer = torch.optim.Adam([W, H], lr=0.05)
for it in range(60):
    optimizer.zero_grad()
    loss = ((W @ H - target) ** 2).mean()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        W.clamp_(min=0)
        H.clamp_(min=0)
    if it % 20 == 0:
        print(it, loss.item())
