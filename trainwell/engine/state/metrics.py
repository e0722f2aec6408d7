"""Running sums of a step's metrics, kept on the device and read at log points only.

Every ``.item()`` is a CPU-GPU sync, so a step only adds its values (weighted by the
batch's sample count) to tensors on the device; the means are read once per log window,
once per evaluation. On several processes the sums and counts are added over ranks in
one collective, so a mean counts every sample of every rank once.

Example:
    >>> sums = MetricSums(torch.device("cpu"))
    >>> sums.add({"loss": torch.tensor(2.0), "mae": torch.tensor(1.0)}, n=4)
    >>> sums.add({"loss": torch.tensor(1.0), "mae": torch.tensor(0.5)}, n=4)
    >>> sums.add({"acc": (torch.tensor(3), 4)}, n=4)   # a ratio: 3 right of 4
    >>> sums.means()
    {'acc': 0.75, 'loss': 1.5, 'mae': 0.75}
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import torch

from trainwell.engine.distributed.placement import Placement, all_reduce_sum, gather_objects

_DTYPE, _SHAPE, _SCALAR = operator.attrgetter("dtype"), operator.attrgetter("shape"), torch.Size()


class MetricSums:
    """Sums of ``value * n`` and of ``n`` per metric name, on one device.

    A step's values are only noted (a list append: the cheapest thing a step can do) and
    folded into the sums in one stacked kernel when read, or every
    :attr:`FOLD_EVERY` values; ratios are added at once.
    """

    # Values noted per metric before they are folded: bounds the memory of a long window.
    FOLD_EVERY = 256

    def __init__(self, device: torch.device, dtype: torch.dtype = torch.float32) -> None:
        self.device = device
        # float64 where the device has it (evaluation sums over a whole split); MPS has not.
        self.dtype = torch.float32 if device.type == "mps" else dtype
        self.sums: dict[str, torch.Tensor] = {}
        # Denominators: Python numbers, plus a device tensor for those a step computed.
        self.counts: dict[str, int] = {}
        self.device_counts: dict[str, torch.Tensor] = {}
        # Values noted but not yet folded, and their sample counts.
        self.pending: dict[str, list[torch.Tensor]] = {}
        self.pending_n: dict[str, list[int]] = {}

    def add(self, values: Mapping[str, Any], n: int) -> None:
        """Add one batch's values (scalar tensors on the device, weighted by ``n`` samples,
        or ``(numerator, denominator)`` ratios, summed as they are). No sync."""
        for name, value in values.items():
            if isinstance(value, tuple):
                self._total(name).add_(value[0].detach().reshape(()))
                self._count(name, value[1])
                continue
            held = self.pending.get(name)
            if held is None:  # (pending_of's work, inline: a call less per value)
                held = self.pending[name] = []
                self.pending_n[name] = []
            # A value without grad (the stepper's detached loss) needs no detach: one op less.
            held.append(value.detach() if value.requires_grad else value)
            self.pending_n[name].append(n)
            if len(held) >= self.FOLD_EVERY:
                self.fold(name)

    def _total(self, name: str) -> torch.Tensor:
        total = self.sums.get(name)
        if total is None:
            total = self.sums[name] = torch.zeros((), device=self.device, dtype=self.dtype)
            self.counts[name] = 0
        return total

    def pending_of(self, name: str) -> tuple[list[torch.Tensor], list[int]]:
        """The lists ``name``'s values and sample counts are noted in until folded (made if
        need be): a loop that notes one scalar per step appends to them itself, as
        :meth:`add` does, and calls :meth:`fold` when they hold :attr:`FOLD_EVERY`."""
        values = self.pending.get(name)
        if values is None:
            values = self.pending[name] = []
            self.pending_n[name] = []
        return values, self.pending_n[name]

    def fold(self, name: str) -> None:
        """Add ``name``'s noted values into its sum (the lists are then new ones)."""
        values, ns = self.pending.pop(name), self.pending_n.pop(name)
        if not values:  # lists made by pending_of that nothing was noted in
            return
        # The usual: 0-d values of one dtype: one stack, one conversion (the same values
        # as converting each; two dispatches per value fewer). Checked with map, in C.
        if len(set(map(_DTYPE, values))) == 1 and set(map(_SHAPE, values)) == {_SCALAR}:
            stacked = torch.stack(values).to(self.dtype)
        else:
            stacked = torch.stack([v.reshape(()).to(self.dtype) for v in values])
        if ns.count(ns[0]) == len(ns):  # the usual case: equal batches, no transfer
            weighted = stacked.sum() * ns[0]
        else:
            weights = torch.tensor(ns, dtype=self.dtype).to(self.device, non_blocking=True)
            weighted = (stacked * weights).sum()
        self._total(name).add_(weighted)
        self.counts[name] += sum(ns)

    def _fold_all(self) -> None:
        for name in list(self.pending):
            self.fold(name)

    def _count(self, name: str, denominator: int | torch.Tensor) -> None:
        if not isinstance(denominator, torch.Tensor):
            self.counts[name] += denominator
            return
        held = self.device_counts.get(name)
        if held is None:
            held = self.device_counts[name] = torch.zeros((), device=self.device, dtype=self.dtype)
        held.add_(denominator.detach().reshape(()))

    def merge(self, other: MetricSums) -> None:
        """Add ``other``'s sums into these (a log window into its epoch)."""
        other._fold_all()
        for name, total in other.sums.items():
            self._total(name).add_(total)
            self.counts[name] += other.counts[name]
        for name, count in other.device_counts.items():
            self._count(name, count)

    @property
    def empty(self) -> bool:
        """Nothing added since the last reset."""
        return not (self.sums or any(self.pending.values()))

    def reset(self) -> None:
        self.sums.clear()
        self.counts.clear()
        self.device_counts.clear()
        self.pending.clear()
        self.pending_n.clear()

    def means(self, place: Placement | None = None) -> dict[str, float]:
        """The mean of every metric: the window's one sync (and one collective on N ranks)."""
        self._fold_all()
        names = sorted(self.sums)
        if place is not None and place.distributed:
            # A step may return a metric on some batches only: agree on the names first.
            names = sorted({n for ranks in gather_objects(names, place) for n in ranks})
        zero = torch.zeros((), device=self.device, dtype=self.dtype)
        # One transfer for all the sums and device counts: the window's single sync.
        held = [self.sums.get(n, zero) for n in names] + [
            self.device_counts.get(n, zero) for n in names
        ]
        read = torch.stack(held).tolist() if names else []
        values = read[: len(names)]
        counts = [self.counts.get(n, 0) + c for n, c in zip(names, read[len(names) :])]
        if place is not None and place.distributed:
            reduced = all_reduce_sum(values + counts, place)
            values, counts = reduced[: len(names)], reduced[len(names) :]
        return {n: v / c for n, v, c in zip(names, values, counts) if c > 0}

    def state_dict(self) -> dict[str, Any]:
        """Tensors on the CPU and plain numbers: loads with ``weights_only=True``.

        Values not yet folded are saved as they are, not folded: a resumed run must fold
        at the very steps the uninterrupted one does, or the sums differ in the last bit.
        """
        return {
            "sums": {k: v.detach().cpu() for k, v in self.sums.items()},
            "counts": dict(self.counts),
            "device_counts": {k: v.detach().cpu() for k, v in self.device_counts.items()},
            "pending": {k: [v.detach().cpu() for v in vs] for k, vs in self.pending.items() if vs},
            "pending_n": {k: list(ns) for k, ns in self.pending_n.items() if ns},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.sums = {k: v.to(self.device) for k, v in state["sums"].items()}
        self.counts = {k: int(v) for k, v in state["counts"].items()}
        self.device_counts = {
            k: v.to(self.device) for k, v in state.get("device_counts", {}).items()
        }
        self.pending = {k: [v.to(self.device) for v in vs]
                        for k, vs in state.get("pending", {}).items()}  # fmt: skip
        self.pending_n = {k: [int(n) for n in ns] for k, ns in state.get("pending_n", {}).items()}
