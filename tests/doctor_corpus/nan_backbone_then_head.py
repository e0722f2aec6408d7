# (review script) written to the doctor's spec; expected: nonfinite-loss@18 (the log of a zero power)
# Backbone and head kept as two modules (features = backbone(x); logits = head(features)),
# as in many fine-tuning scripts. The backbone's hand-written log-magnitude feature,
# log(|x @ W|), is -inf when a projection is exactly 0 (a zero-padded input frame).
import torch
import torch.nn.functional as F
from torch import nn


class SpectralBackbone(nn.Module):
    def __init__(self, n_in, n_bins):
        super().__init__()
        self.filters = nn.Linear(n_in, n_bins, bias=False)
        self.mix = nn.Linear(n_bins, 32)

    def forward(self, frames):
        power = self.filters(frames).abs()
        logpow = torch.log(power)  # expect: nonfinite-loss
        return F.relu(self.mix(logpow))


torch.manual_seed(0)
frames = torch.randn(512, 40)
frames[300:304] = 0.0  # silence padding at the end of a clip
labels = (frames[:, :20].pow(2).sum(1) > frames[:, 20:].pow(2).sum(1)).long()
backbone = SpectralBackbone(40, 16)
head = nn.Linear(32, 2)
optimizer = torch.optim.Adam([*backbone.parameters(), *head.parameters()], lr=1e-3)
for epoch in range(2):
    for i in range(0, 512, 64):
        features = backbone(frames[i : i + 64])
        logits = head(features)
        loss = F.cross_entropy(logits, labels[i : i + 64])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
