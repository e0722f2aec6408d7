# Full-batch logistic regression with L-BFGS; the closure zeroes the
# gradients first (the twin of nozero_lbfgs_closure_logistic).
import torch
import torch.nn.functional as F

torch.manual_seed(1)
X = torch.randn(400, 6)
w_true = torch.randn(6)
y = (X @ w_true + 0.3 * torch.randn(400) > 0).float()

weights = torch.zeros(6, requires_grad=True)
bias = torch.zeros(1, requires_grad=True)
solver = torch.optim.LBFGS([weights, bias], lr=1, max_iter=4, history_size=5)


def objective():
    solver.zero_grad()
    logits = X @ weights + bias
    nll = F.binary_cross_entropy_with_logits(logits, y)
    nll.backward()
    return nll


for it in range(3):
    value = solver.step(objective)
    print(it, value.item())
