"""``trainwell bench-data``'s library: how fast the data pipeline alone can go, and how.

The data pipeline, not the network, most often sets a training's pace. This package
runs the loader alone (the engine's training loader as the config builds it, or a user's
DataLoader factory), sweeps ``num_workers``, ``pin_memory`` (with CUDA),
``persistent_workers`` and ``prefetch_factor`` within a time budget, and recommends the
cheapest setting within 5% of the fastest. With the model, it also times training steps
on batches held in memory and says which side is the bottleneck.

Layers, each importing only those below it: ``settings`` (settings, rows, the
recommendation rule) <- ``measure`` (timing one setting) <- ``sources`` (where batches
come from) <- ``sweep`` <- ``model_rate`` <- ``render``, ``apply`` <- ``bench``.

Example:
    >>> rows = [Row(Setting(0), 50.0, 0.01), Row(Setting(1), 51.0, 0.3)]
    >>> recommend(rows).setting.num_workers  # within 5% of the fastest, and cheaper
    0
"""

from __future__ import annotations

from trainwell.benchdata.settings import Row, Setting, recommend, worker_counts

__all__ = ["Row", "Setting", "recommend", "worker_counts"]
