# Full-batch regression with dropout and batch norm; evaluate() is called once an epoch
# on the whole validation set in eval mode (the twin of trainmode_fullbatch_eval_each_epoch).
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(600, 16)
Y = X[:, :4].sum(1, keepdim=True) + 0.1 * torch.randn(600, 1)
Xt, Yt, Xv, Yv = X[:500], Y[:500], X[500:], Y[500:]

net = nn.Sequential(
    nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 1)
)
optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
loss_fn = nn.MSELoss()


def evaluate():
    net.eval()
    with torch.no_grad():
        pred = net(Xv)
        val = loss_fn(pred, Yv).item()
    net.train()
    return val


for epoch in range(20):
    optimizer.zero_grad()
    loss = loss_fn(net(Xt), Yt)
    loss.backward()
    optimizer.step()
    if epoch % 5 == 0:
        print(f"epoch {epoch} train {loss.item():.4f} val {evaluate():.4f}")
