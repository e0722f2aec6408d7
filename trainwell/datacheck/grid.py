"""A grid of labelled samples of an image data set, as a PNG (one row per class).

Pixels are shown on the split's own range, not each image's: an image that is all
black or all white here is one that the network sees that way too.
"""

from __future__ import annotations

from pathlib import Path

import torch

from trainwell.datacheck.split import GRID_PER_CLASS, SplitReport


def write_grid(report: SplitReport, path: Path) -> Path | None:
    """Write ``report.images`` as a grid to ``path``; ``None`` when there are no images."""
    if not report.images:
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, and no GUI backend to start
    import matplotlib.pyplot as plt

    rows = _rows(report.images)
    lo, hi = _range(report)
    n_rows, n_cols = len(rows), max(len(r) for r in rows)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(1.2 * n_cols, 1.3 * n_rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for r, row in enumerate(rows):
        for c, (image, label) in enumerate(row):
            ax = axes[r][c]
            ax.imshow(_displayable(image), cmap="gray", vmin=lo, vmax=hi, interpolation="nearest")
            if label is not None:
                ax.set_title(str(label), fontsize=8)
    fig.suptitle(f"{report.name}: samples" + (" by class" if rows[0][0][1] is not None else ""))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _rows(images: list[tuple[torch.Tensor, int | None]]) -> list[list]:
    if images[0][1] is None:
        return [images[i : i + GRID_PER_CLASS] for i in range(0, len(images), GRID_PER_CLASS)]
    by_class: dict[int, list] = {}
    for image, label in images:
        by_class.setdefault(label, []).append((image, label))
    return [by_class[k] for k in sorted(by_class)]


def _range(report: SplitReport) -> tuple[float | None, float | None]:
    stats = report.inputs.get(report.main_input or "")
    d = stats.values.to_dict() if stats is not None else {}
    if d.get("min") is None or d["min"] == d["max"]:
        return None, None
    return d["min"], d["max"]


def _displayable(image: torch.Tensor):
    t = torch.nan_to_num(image.detach().float().cpu())
    if t.ndim == 3 and t.shape[0] in (1, 3, 4) and t.shape[-1] not in (1, 3, 4):
        t = t.permute(1, 2, 0)  # (C, H, W) -> (H, W, C), as imshow wants
    if t.ndim == 3 and t.shape[-1] == 1:
        t = t[..., 0]
    if t.ndim == 3:
        # Colour images are shown on [0, 1]: imshow ignores vmin/vmax for RGB.
        lo, hi = float(t.min()), float(t.max())
        t = (t - lo) / (hi - lo) if hi > lo else t * 0
    return t.numpy()
