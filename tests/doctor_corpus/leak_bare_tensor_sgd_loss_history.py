# A bigram-style model written with bare tensors and a hand-written SGD update (no
# nn.Module, no optimizer): the loss history keeps each step's tensor and graph.
import torch
import torch.nn.functional as F

g = torch.Generator().manual_seed(0)
xs = torch.randint(0, 20, (2000,), generator=g)
ys = (xs * 7 + 3) % 20
W = torch.randn(20, 20, generator=g, requires_grad=True)
b = torch.zeros(20, requires_grad=True)
history = []
for k in range(60):
    ix = torch.randint(0, 2000, (64,), generator=g)
    logits = F.one_hot(xs[ix], 20).float() @ W + b
    loss = F.cross_entropy(logits, ys[ix])
    W.grad = None
    b.grad = None
    loss.backward()
    with torch.no_grad():
        W -= 0.5 * W.grad
        b -= 0.5 * b.grad
    history.append(loss)  # expect: graph-retained
