# An angular loss: the angle between an embedding and its class centre is acos of their
# cosine, which reaches exactly 1 for a sample on its centre; acos's gradient there is
# infinite and the weights' gradients turn NaN.
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
centres = F.normalize(torch.randn(3, 6), dim=1)
net = nn.Linear(6, 6, bias=False)
with torch.no_grad():
    net.weight.copy_(torch.eye(6))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
labels = torch.randint(0, 3, (24,))
for step in range(10):
    emb = F.normalize(net(centres[labels]), dim=1)
    cos = (emb * centres[labels]).sum(1).clamp(-1.0, 1.0)
    angle = torch.acos(cos)  # expect: nonfinite-grad
    loss = angle.mean()
    opt.zero_grad()
    loss.backward()  # expect-related: nonfinite-grad
    opt.step()
