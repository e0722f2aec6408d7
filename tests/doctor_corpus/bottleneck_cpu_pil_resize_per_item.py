# Photos kept at full size and resized, cropped and flipped with PIL on every access,
# in the main process: the CPU-bound decode of an ImageFolder pipeline. On any machine
# with two cores or more, workers win back seconds of this run.
import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Photos(Dataset):
    def __init__(self, n):
        rng = np.random.default_rng(0)
        self.images = [rng.integers(0, 255, (480, 640, 3), dtype=np.uint8) for _ in range(16)]
        self.labels = rng.integers(0, 5, n)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):  # expect-related: data-bottleneck
        img = Image.fromarray(self.images[i % 16])
        img = img.resize((320, 240), Image.BILINEAR).rotate(7.0).crop((40, 8, 280, 232))
        img = img.resize((64, 64), Image.BICUBIC).transpose(Image.FLIP_LEFT_RIGHT)
        x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return x, int(self.labels[i])


torch.manual_seed(0)
loader = DataLoader(Photos(1280), batch_size=32, shuffle=True)  # expect: data-bottleneck
model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for x, y in loader:
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
