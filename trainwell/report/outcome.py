"""What two runs got, side by side (``trainwell runs --diff``): their final metrics, speed
and processes, every number in one format, and when only the number of processes differs
in throughput, the scaling ratio with the articles' verdict."""

from __future__ import annotations

from typing import Any

from trainwell.report.compare import final_metrics, fmt
from trainwell.report.rundata import Run

# The articles' rule of thumb for data parallelism on 2 devices.
GOOD_SCALING = 1.5


def scaling_verdict(ratio: float, processes: int = 2, base: int = 1) -> str:
    """The verdict on ``ratio`` = samples/s on ``processes`` over samples/s on ``base``:
    data parallelism should give well over 1.5x on 2 devices (scaled for more); under it,
    the step is not the device's compute (the data pipeline, a batch per process too small)
    or the all-reduce is slow against the work between two.

    Example:
        >>> scaling_verdict(1.9)
        'verdict: scales (1.9x on 2 processes against 1; 1.5x or more expected)'
        >>> scaling_verdict(1.2).split(":")[1]
        ' under 1.5x (1.2x on 2 processes against 1)'
    """
    expected = 1 + (GOOD_SCALING - 1) * (processes / base - 1)
    shown = f"{fmt(ratio)}x on {processes} processes against {base}"
    if ratio >= expected:
        return f"verdict: scales ({shown}; {fmt(expected)}x or more expected)"
    return (f"verdict: under {fmt(expected)}x ({shown}): look at the data pipeline (trainwell "
            "bench-data) and the batch per process before adding processes; on a CPU the "
            "processes also share its cores")  # fmt: skip


def outcome_rows(runs: list[Run]) -> list[tuple[str, list[str]]]:
    """``[(what, [value per run])]``: shared final metrics, then steps, samples/s, processes
    and wall time, each number in :func:`~trainwell.report.compare.fmt`'s format.

    Example:
        >>> from pathlib import Path
        >>> a = Run(Path("a"), "a", summary={"final": {"val/loss": 0.51234}, "world_size": 1})
        >>> b = Run(Path("b"), "b", summary={"final": {"val/loss": 0.4}, "world_size": 2})
        >>> outcome_rows([a, b])
        [('val/loss', ['0.5123', '0.4']), ('processes', ['1', '2'])]
    """
    finals = [final_metrics(run) for run in runs]
    shared = sorted(set.intersection(*(set(f) for f in finals))) if finals else []
    rows = [(key, [fmt(f[key]) for f in finals]) for key in shared]
    for key, label in (("steps", "steps"), ("samples_per_s", "samples/s"),
                       ("world_size", "processes"), ("wall_time_s", "wall s")):  # fmt: skip
        values = [run.summary.get(key) for run in runs]
        if any(isinstance(v, int | float) for v in values):
            rows.append((label, [fmt(v) if v is not None else "-" for v in values]))
    return rows


def scaling_line(runs: list[Run]) -> str | None:
    """The verdict when two runs differ in processes and both measured samples/s."""
    if len(runs) != 2:
        return None
    sizes = [_number(run.summary.get("world_size"), 1) for run in runs]
    speeds = [_number(run.summary.get("samples_per_s"), None) for run in runs]
    if sizes[0] == sizes[1] or None in speeds or not all(speeds):
        return None
    (small, slow), (big, fast) = sorted(zip(sizes, speeds))
    return scaling_verdict(fast / slow, int(big), int(small))


def _number(value: Any, default: Any) -> Any:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default
