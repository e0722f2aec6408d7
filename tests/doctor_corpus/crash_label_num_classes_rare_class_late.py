# A sensor-fault classifier with N_FAULTS = 5 outputs, trained in file order over logs
# where a sixth fault kind (label 5) first shows up after the doctor's first 64 checked
# batches: PyTorch's IndexError is explained at the loss, the head's size related.
import torch
from torch import nn

N_FAULTS = 5  # expect-related: label-out-of-range


class FaultNet(nn.Module):
    def __init__(self, n_out):
        super().__init__()
        self.encoder = nn.GRU(4, 16, batch_first=True)
        self.classify = nn.Linear(16, n_out)  # expect-related: label-out-of-range

    def forward(self, x):
        _, h = self.encoder(x)
        return self.classify(h[-1])


torch.manual_seed(0)
logs = torch.randn(80 * 8, 12, 4)
kinds = torch.randint(0, 5, (80 * 8,))
kinds[75 * 8 + 3] = 5  # the rare kind, late in the file
net = FaultNet(N_FAULTS)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for i in range(0, len(logs), 8):
    opt.zero_grad()
    loss = criterion(net(logs[i:i + 8]), kinds[i:i + 8])  # expect: label-out-of-range
    loss.backward()
    opt.step()
