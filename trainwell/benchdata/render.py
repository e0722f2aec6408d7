"""The sweep as the terminal shows it: a table, the recommendation and the verdict.

Example:
    >>> import io
    >>> from trainwell.engine.loop.progress import make_console
    >>> from trainwell.benchdata.settings import Row, rate_text, Setting
    >>> from trainwell.benchdata.sweep import SweepResult
    >>> rows = [Row(Setting(0), 10.0, 0.01), Row(Setting(1), 30.0, 0.2)]
    >>> out = io.StringIO()
    >>> render(SweepResult(rows, rows[1], rows[1]), make_console(out))
    >>> "recommended" in out.getvalue() and "3.0x" in out.getvalue()
    True
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from trainwell.benchdata.model_rate import ModelRate, Verdict
from trainwell.benchdata.settings import Row, rate_text
from trainwell.benchdata.sweep import SweepResult


def render(
    result: SweepResult,
    console: Console,
    rate: ModelRate | None = None,
    judged: Verdict | None = None,
) -> None:
    """Print the table of ``result``, the recommended setting, and the model's verdict."""
    console.print(_table(result))
    rec = result.recommended
    if rec.setting.num_workers is None:
        console.print(f"  {rate_text(rec.batches_per_s)} batches/s as given; nothing to sweep",
                      highlight=False)  # fmt: skip
    else:
        _recommendation(result, console)
    if rate is not None and judged is not None:
        console.print(
            f"  model         {rate_text(rate.batches_per_s)} batches/s ({rate.precision} on "
            f"{rate.device}, {rate.steps} optimizer steps on batches held in memory)",
            highlight=False,
        )
        console.print(f"  verdict       {judged.sentence}", highlight=False)
        if rate.device == "cpu" and (rec.setting.num_workers or 0) > 0:
            note = "on the CPU the workers and the model share the cores: training gets less"
            console.print(f"  note          {note} than either rate", highlight=False)


def _recommendation(result: SweepResult, console: Console) -> None:
    rec, best = result.recommended, result.best
    plain = next((row for row in result.rows if row.setting.num_workers == 0), None)
    gains = []
    if plain is not None and plain is not rec and plain.batches_per_s > 0:
        gains.append(f"{rec.batches_per_s / plain.batches_per_s:.1f}x num_workers=0")
    if best is not rec and best.batches_per_s > 0:
        gains.append(f"{rec.batches_per_s / best.batches_per_s:.0%} of the fastest")
    detail = f" ({', '.join(gains)})" if gains else ""
    console.print(
        f"  recommended   {rec.setting.describe()}: {rate_text(rec.batches_per_s)} batches/s"
        f"{detail}",
        highlight=False,
    )
    overrides = " ".join(rec.setting.overrides(pin=result.cuda))
    console.print(f"  override      {overrides}", highlight=False, markup=False)


def _table(result: SweepResult) -> Table:
    table = Table(title=None, box=None, pad_edge=False, header_style="bold")
    for name in ("workers", "pin", "persist", "prefetch", "batches/s", "first", "peak RSS"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for row in result.rows:
        table.add_row(*_cells(row), _mark(row, result))
    return table


def _cells(row: Row) -> list[str]:
    s = row.setting
    if s.num_workers is None:
        knobs = ["as given", "", "", ""]
    else:
        prefetch = "-" if not s.num_workers else str(s.prefetch_factor or "2")
        knobs = [str(s.num_workers), _flag(s.pin_memory), _flag(s.persistent_workers), prefetch]
    rss = "-" if row.peak_rss_mb is None else f"{row.peak_rss_mb:.0f} MB"
    return [*knobs, rate_text(row.batches_per_s), f"{row.first_batch_s:.2f}s", rss]


def _flag(on: bool) -> str:
    return "yes" if on else "no"


def _mark(row: Row, result: SweepResult) -> str:
    marks = []
    if row is result.recommended:
        marks.append("[bold green]<- recommended[/]")
    if row is result.best and row is not result.recommended:
        marks.append("fastest")
    return " ".join(marks)
