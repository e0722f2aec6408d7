"""A grid of labelled samples of an image data set, as a PNG (one row per class).

The samples are tiled into one picture and drawn once (a figure of 80 axes takes
matplotlib seconds). Pixels are shown on the split's own range, not each image's: an
image that is all black or all white here is one that the network sees that way too.
"""

from __future__ import annotations

from pathlib import Path

import torch

from trainwell.datacheck.split import GRID_PER_CLASS, SplitReport

# Pixels between tiles.
GAP = 1


def write_grid(report: SplitReport, path: Path) -> Path | None:
    """Write ``report.images`` as a grid to ``path``; ``None`` when there are no images."""
    if not report.images:
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, and no GUI backend to start
    import matplotlib.pyplot as plt

    rows = _rows(report.images)
    lo, hi = _range(report)
    tiles = [[_displayable(image, lo, hi) for image, _ in row] for row in rows]
    mosaic, tile_h = _mosaic(tiles)
    height, width = mosaic.shape[:2]
    scale = max(1.0, 48 / tile_h)  # small images (8x8 digits) drawn bigger
    fig, ax = plt.subplots(figsize=(1.5 + width * scale / 72, 0.8 + height * scale / 72))
    ax.imshow(mosaic.numpy(), cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    ax.set_xticks([])
    labelled = rows[0][0][1] is not None
    if labelled:
        ax.set_yticks([r * (tile_h + GAP) + tile_h / 2 for r in range(len(rows))])
        ax.set_yticklabels([f"class {row[0][1]}" for row in rows], fontsize=8)
    else:
        ax.set_yticks([])
    ax.set_title(f"{report.name}: samples" + (" by class" if labelled else ""), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return path


Row = list[tuple[torch.Tensor, int | None]]


def _rows(images: Row) -> list[Row]:
    if images[0][1] is None:
        return [images[i : i + GRID_PER_CLASS] for i in range(0, len(images), GRID_PER_CLASS)]
    by_class: dict[int, Row] = {}
    for image, label in images:
        # A labelled split keeps labelled samples only (one without a target has no row).
        if label is not None:
            by_class.setdefault(label, []).append((image, label))
    return [by_class[k] for k in sorted(by_class)]


def _range(report: SplitReport) -> tuple[float, float]:
    stats = report.inputs.get(report.main_input or "")
    d = stats.values.summary() if stats is not None else None
    if d is None or d.min == d.max:
        return 0.0, 1.0
    return d.min, d.max


def _displayable(image: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """``(H, W, 3)`` in [0, 1] on the split's range."""
    t = torch.nan_to_num(image.detach().float().cpu())
    if t.ndim == 3 and t.shape[0] in (1, 3, 4) and t.shape[-1] not in (1, 3, 4):
        t = t.permute(1, 2, 0)  # (C, H, W) -> (H, W, C)
    if t.ndim == 2:
        t = t.unsqueeze(-1)
    t = t[..., :3]  # an alpha channel is not shown
    if t.shape[-1] == 1:
        t = t.expand(-1, -1, 3)
    return ((t - lo) / (hi - lo)).clamp(0, 1)


def _mosaic(tiles: list[list[torch.Tensor]]) -> tuple[torch.Tensor, int]:
    tile_h = max(t.shape[0] for row in tiles for t in row)
    tile_w = max(t.shape[1] for row in tiles for t in row)
    cols = max(len(row) for row in tiles)
    out = torch.ones(len(tiles) * (tile_h + GAP) - GAP, cols * (tile_w + GAP) - GAP, 3)
    for r, row in enumerate(tiles):
        for c, t in enumerate(row):
            y, x = r * (tile_h + GAP), c * (tile_w + GAP)
            out[y : y + t.shape[0], x : x + t.shape[1]] = t
    return out, tile_h
