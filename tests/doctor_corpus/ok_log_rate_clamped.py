# Poisson regression of event counts where the rate goes through a ReLU: the log is taken
# of the rate clamped away from zero, so a zero rate gives a large but finite loss.
import torch
from torch import nn

EPS = 1e-6


class RateModel(nn.Module):
    def __init__(self, n_features):
        super().__init__()
        self.hidden = nn.Linear(n_features, 32)
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        rate = torch.relu(self.out(torch.tanh(self.hidden(x))))
        log_rate = torch.log(rate.clamp_min(EPS))
        return log_rate.squeeze(1)


torch.manual_seed(0)
x = torch.randn(256, 6)
counts = torch.poisson(torch.exp(0.5 * x[:, 0] - 0.3 * x[:, 1]))
model = RateModel(6)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(5):
    for i in range(0, 256, 32):
        xb, yb = x[i : i + 32], counts[i : i + 32]
        log_rate = model(xb)
        loss = (torch.exp(log_rate) - yb * log_rate).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} poisson nll {loss.item():.4f}")
