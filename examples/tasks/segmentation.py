"""Per-pixel segmentation: targets (N, H, W), unsure pixels ignored, pixel accuracy logged.

    cd examples/tasks && trainwell train --config segmentation.yaml
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

IGNORE = 255  # label of pixels nobody should be graded on (object outlines, as in VOC)
CLASSES = 3  # 0 background, 1 square, 2 cross


def _images(n: int, size: int, g: torch.Generator):
    masks = torch.zeros(n, size, size, dtype=torch.long)
    for i in range(n):
        for _ in range(3):
            r, c = torch.randint(1, size - 7, (2,), generator=g).tolist()
            if torch.rand((), generator=g) < 0.5:
                masks[i, r : r + 6, c : c + 6] = 1  # a filled 6x6 square
            else:
                masks[i, r + 2 : r + 4, c : c + 6] = 2  # a cross 6 wide, 2 thick
                masks[i, r : r + 6, c + 2 : c + 4] = 2
    objects = (masks > 0).float()
    images = objects + 0.4 * torch.randn(n, size, size, generator=g)
    # Background pixels touching an object are "unsure": labelled IGNORE.
    near = F.max_pool2d(objects[:, None], 3, stride=1, padding=1)[:, 0] > 0
    masks[near & (masks == 0)] = IGNORE
    return images[:, None], masks  # (N, 1, H, W) float, (N, H, W) long


def make_data(n_train: int = 512, n_val: int = 128, size: int = 16):
    g = torch.Generator().manual_seed(0)
    x, y = _images(n_train + n_val, size, g)
    return TensorDataset(x[:n_train], y[:n_train]), TensorDataset(x[n_train:], y[n_train:])


def make_model(width: int = 16) -> nn.Module:
    # Fully convolutional: (N, 1, H, W) -> (N, CLASSES, H, W) logits.
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=2, dilation=2), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=2, dilation=2), nn.ReLU(),
        nn.Conv2d(width, CLASSES, 1),
    )


def step(model, batch):
    images, masks = batch
    logits = model(images)
    loss = F.cross_entropy(logits, masks, ignore_index=IGNORE)
    valid = masks != IGNORE
    correct = (logits.argmax(dim=1) == masks) & valid
    # A ratio (numerator, denominator): summed over the split and divided once, so
    # pixel_acc is exact over the graded pixels of the whole split.
    return {"loss": loss, "pixel_acc": (correct.sum(), valid.sum())}
