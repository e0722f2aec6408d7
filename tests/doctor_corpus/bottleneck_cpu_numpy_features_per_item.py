# Audio clips turned into log-spectrograms with numpy on every access (a framing loop,
# a window, an FFT per frame), with num_workers left at 0: the feature extraction a
# speech tutorial does once ahead of time, here paid on every batch of every epoch.
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Clips(Dataset):
    def __init__(self, n):
        rng = np.random.default_rng(1)
        self.waves = rng.standard_normal((n, 8000)).astype(np.float32)
        self.labels = rng.integers(0, 4, n)

    def __len__(self):
        return len(self.waves)

    def __getitem__(self, i):  # expect-related: data-bottleneck
        wave, window = self.waves[i], np.hanning(256).astype(np.float32)
        frames = [np.abs(np.fft.rfft(wave[s : s + 256] * window)) for s in range(0, 7744, 64)]
        spec = np.log1p(np.stack(frames))  # (121, 129)
        return torch.from_numpy(spec.astype(np.float32)), int(self.labels[i])


def main():
    torch.manual_seed(0)
    train = DataLoader(Clips(1280), batch_size=32, shuffle=True)  # expect: data-bottleneck
    model = nn.Sequential(nn.Flatten(), nn.Linear(121 * 129, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for epoch in range(2):
        model.train()
        for x, y in train:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
