"""Parity: an exported artifact against the PyTorch model, on real batches of several sizes.

Sizes include 1 and an odd size that the export never saw, so a batch size baked into the
graph, or a trace that froze a shape or a branch, shows up here and not in production.
Outputs are compared element by element with tolerances suited to their dtype
(``|artifact - model| <= atol + rtol * |model|``, as ``torch.allclose``); the relative
difference printed is the largest difference over the largest output value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from trainwell.errors import UserError
from trainwell.export.batches import Batch

# (atol, rtol) by dtype: float32 kernels differ in summation order between runtimes.
_TOLERANCES = {
    torch.float64: (1e-8, 1e-6),
    torch.float32: (1e-4, 1e-3),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}

Runner = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


@dataclass
class ParityRow:
    """One batch size: the largest differences over every output, and the verdict."""

    batch: int
    max_abs: float
    max_rel: float
    ok: bool
    note: str = ""


@dataclass
class Parity:
    """The parity check of one artifact."""

    artifact: str
    dtype: str
    atol: float
    rtol: float
    rows: list[ParityRow] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)

    def lines(self) -> list[str]:
        """The check as a small table, one line per batch size."""
        head = (
            f"parity of {self.artifact} against PyTorch ({self.dtype}: atol {self.atol:g}, "
            f"rtol {self.rtol:g})"
        )
        rows = [
            f"  batch {r.batch:>3}: max abs diff {r.max_abs:.2e}, max rel diff {r.max_rel:.2e}  "
            f"{'ok' if r.ok else 'FAILED'}{'  ' + r.note if r.note else ''}"
            for r in self.rows
        ]
        return [head, *rows]


class ParityError(RuntimeError):
    """The artifact disagrees with the model; nothing was written. Carries the table."""

    def __init__(self, parity: Parity, notes: list[str] | None = None) -> None:
        super().__init__(f"{parity.artifact} disagrees with the PyTorch model")
        self.parity = parity
        self.notes = notes or []

    def lines(self) -> list[str]:
        """The parity table, then the notes that may explain it (the tracer's warnings)."""
        return [*self.parity.lines(), *(f"note: {n}" for n in self.notes)]


def flat_outputs(out: object) -> list[torch.Tensor]:
    """A model's outputs as a flat list of tensors (a tensor, a tuple/list, a dict)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in flat_outputs(item)]
    if isinstance(out, dict):
        return [t for item in out.values() for t in flat_outputs(item)]
    raise UserError(
        f"the model returns a {type(out).__name__}; export takes models that return tensors"
    )


def run_model(model: nn.Module, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The PyTorch model on named inputs, without autograd."""
    with torch.inference_mode():
        return flat_outputs(model(*inputs.values()))


def check_parity(
    model: nn.Module,
    artifact: Runner,
    batches: Sequence[Batch],
    name: str,
    seen: int | None = None,
) -> Parity:
    """Compare ``artifact`` (numpy in, numpy out) with ``model`` on every batch.

    Example:
        >>> net = torch.nn.Linear(3, 2).eval()
        >>> same = lambda x: [net(torch.from_numpy(x["input"])).detach().numpy()]
        >>> b = [Batch({"input": torch.ones(n, 3)}, None) for n in (1, 7)]
        >>> check_parity(net, same, b, "itself").ok
        True
    """
    first = run_model(model, batches[0].inputs)[0]
    atol, rtol = _TOLERANCES.get(first.dtype, (0.0, 0.0))
    parity = Parity(name, str(first.dtype).replace("torch.", ""), atol, rtol)
    for batch in batches:
        expected = run_model(model, batch.inputs)
        arrays = {k: v.numpy() for k, v in batch.inputs.items()}
        try:
            got = artifact(arrays)
        except Exception as exc:  # the runtime's refusal (a frozen shape) is the finding
            text = str(exc).strip().splitlines()
            note = f"the artifact failed on it: {text[0][:200] if text else type(exc).__name__}"
            parity.rows.append(ParityRow(batch.size, float("inf"), float("inf"), False, note))
            continue
        row = _compare(expected, got, batch.size, atol, rtol)
        if seen is not None and batch.size == seen and not row.note:
            row.note = "(the export's example size)"
        parity.rows.append(row)
    return parity


def _compare(
    expected: list[torch.Tensor], got: list[np.ndarray], size: int, atol: float, rtol: float
) -> ParityRow:
    if len(got) != len(expected):
        return ParityRow(size, float("inf"), float("inf"), False,
                         f"{len(got)} outputs, the model gives {len(expected)}")  # fmt: skip
    worst_abs = worst_rel = 0.0
    ok = True
    for want, have in zip(expected, got):
        have_t = torch.as_tensor(np.asarray(have))
        if tuple(have_t.shape) != tuple(want.shape):
            note = f"output shape {tuple(have_t.shape)}, the model gives {tuple(want.shape)}"
            return ParityRow(size, float("inf"), float("inf"), False, note)
        want64, have64 = want.double(), have_t.double()
        diff = (have64 - want64).abs()
        if diff.numel():
            # Relative to the output's scale (its largest value): element by element, values
            # near 0 would make any rounding look enormous.
            worst = float(diff.nan_to_num(float("inf")).max())
            scale = float(want64.abs().nan_to_num(0.0).max())
            worst_abs = max(worst_abs, worst)
            worst_rel = max(worst_rel, worst / scale if scale > 0 else float(worst > 0) * worst)
        ok = ok and bool(torch.allclose(have64, want64, atol=atol, rtol=rtol, equal_nan=True))
    return ParityRow(size, worst_abs, worst_rel, ok)
