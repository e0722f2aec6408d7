# The recommended split: the Dataset returns CPU tensors (workers, pinned memory), and
# the training loop moves each whole batch to the device.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class NoisySines(Dataset):
    def __init__(self, n=160):
        g = torch.Generator().manual_seed(0)
        self.phase = torch.rand(n, generator=g) * 6.28
        self.t = torch.linspace(0, 1, 32)

    def __len__(self):
        return len(self.phase)

    def __getitem__(self, i):
        signal = torch.sin(6.28 * 3 * self.t + self.phase[i])
        return signal.unsqueeze(0), (self.phase[i] > 3.14).long()


if __name__ == "__main__":
    loader = DataLoader(NoisySines(), batch_size=32, shuffle=True, num_workers=1,
                        pin_memory=torch.cuda.is_available())
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(1, 8, 5), nn.ReLU(), nn.AdaptiveAvgPool1d(4),
                          nn.Flatten(), nn.Linear(32, 2)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    for epoch in range(2):
        for signal, label in loader:
            signal = signal.to(device, non_blocking=True)
            label = label.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(signal), label)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.3f}")
