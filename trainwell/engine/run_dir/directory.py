"""The run directory: config, environment, metrics, summary, curves and checkpoints.

Layout (fixed in DESIGN.md)::

    <run.dir>/config.yaml  env.json  metrics.csv  summary.json  curves.png  checkpoints/

``summary.json`` says ``running`` from the start and only says ``completed`` once
everything else is written, so a run that dies never looks complete.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import errno
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwell._options import check, option
from trainwell.engine.run_dir.metric_rows import MetricRows
from trainwell.engine.run_dir.metrics_file import kept_rows
from trainwell.errors import UserError

# Names become folder names: no separators, no parent references, no control characters.
_BAD_NAME = re.compile(r"[/\\\x00-\x1f\x7f]")


@dataclass
class RunConfig:
    """Where the run is written, and its seed."""

    dir: str | None = option(
        None, "the run directory itself; without it, runs/<timestamp>-<name> is created"
    )
    name: str = option("", "a name for the run (default: <data>-<model>)")
    seed: int = option(0, "seeds Python, NumPy, torch, the data order and the workers")
    deterministic: bool = option(
        False, "deterministic algorithms (and cuDNN settings): exact but slower"
    )
    device: str = option("auto", "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    cuda_alloc_conf: str = option(
        "", "PYTORCH_CUDA_ALLOC_CONF for the run, set before CUDA starts (e.g. "
        "expandable_segments:True against fragmentation); empty: the environment's"
    )
    safe: bool = option(
        False,
        "safe mode (--safe) for configs from elsewhere: import paths only into your own "
        "modules and an allow-list, no keyword arguments that load or run code",
    )
    allow_imports: list[str] = option(
        [], "module prefixes safe mode also allows (give it on the command line)"
    )

    def __post_init__(self) -> None:
        check(
            not _BAD_NAME.search(self.name)
            and self.name not in (".", "..")
            and ".." not in self.name,
            "run.name",
            f"{self.name!r} must not contain '/', '\\', '..' or control characters",
        )
        # torch takes 64-bit seeds; per-rank seeds add up to 1e6 x ranks on top.
        check(
            isinstance(self.seed, int) and 0 <= self.seed < 2**62,
            "run.seed",
            f"must be an integer in [0, 2**62); got {self.seed}",
        )
        check(
            re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", self.device) is not None,
            "run.device",
            f"expected auto, cpu, cuda, cuda:N or mps; got {self.device!r}",
        )


def default_name(data_name: str, model_name: str) -> str:
    """``<data>-<model>``, import paths shortened to their last part (folder-safe)."""

    def short(name: str) -> str:
        return name.rsplit(":", 1)[-1].rsplit(".", 1)[-1] or "run"

    return f"{short(data_name)}-{short(model_name)}"


def new_run_path(cfg: RunConfig, fallback_name: str, root: Path = Path("runs")) -> Path:
    """The run directory: ``run.dir`` as given, or a new timestamped folder under ``runs/``."""
    if cfg.dir:
        return Path(cfg.dir)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = root / f"{stamp}-{cfg.name or fallback_name}"
    path, n = base, 1
    while path.exists():  # two runs started in the same second
        n += 1
        path = Path(f"{base}-{n}")
    return path


class RunDir:
    """Writes one run's files. Only rank 0 makes one.

    Example:
        >>> import tempfile
        >>> rd = RunDir.create(Path(tempfile.mkdtemp()) / "run")
        >>> rd.log(step=1, epoch=0, split="train", name="loss", value=0.5)
        >>> rd.flush(); rd.metrics_path.read_text().splitlines()[1]
        '1,0,train,loss,0.5'
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.checkpoints = path / "checkpoints"
        self.metrics_path = path / "metrics.csv"
        self.summary_path = path / "summary.json"
        # Only the rows since the last flush are in memory (metric_rows.py): not the run's.
        self.rows = MetricRows(self.metrics_path)
        # The run's RunLock, held by the process that writes here (set when opened).
        self.lock: Any = None
        # What reopening found that the user should hear (a damaged metrics.csv).
        self.notes: list[str] = []

    @classmethod
    def create(cls, path: Path) -> RunDir:
        """Create (or reuse an empty) run directory; refuse one that holds a run."""
        path = Path(path)
        refuse_dangling(path)
        if path.exists() and not path.is_dir():
            raise UserError(f"run.dir: {path} exists and is not a directory")
        summary = path / "summary.json"
        if summary.exists():
            status = _read_status(summary)
            article = "an" if status[:1] in "aeiou" else "a"
            raise UserError(
                f"run.dir: {path} already holds {article} {status} run; choose another run.dir "
                "(or leave it unset for a new timestamped one)"
            )
        try:
            (path / "checkpoints").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"run.dir: cannot create {path}: {exc.strerror}") from None
        rd = cls(path)
        with open(rd.metrics_path, "w", newline="") as f:
            csv.writer(f).writerow(["step", "epoch", "split", "name", "value"])
        return rd

    @classmethod
    def reopen(cls, path: Path, keep_rows: int) -> RunDir:
        """Continue a run directory: keep its first ``keep_rows`` metric rows.

        Rows logged after the checkpoint being resumed are dropped, since the resumed
        run logs them again; metrics.csv then reads as if the run had never stopped.
        """
        rd = cls(Path(path))
        rd.checkpoints.mkdir(parents=True, exist_ok=True)
        # A file deleted or damaged since: what still reads is kept, the rest is a note.
        rows, note = kept_rows(rd.metrics_path, keep_rows)
        rd.notes += [note] if note else []
        # Only a count is kept in memory: the rows are in the file, read when needed.
        rd.rows = MetricRows(rd.metrics_path, count=len(rows))
        tmp = rd.metrics_path.with_name(".metrics.csv.tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["step", "epoch", "split", "name", "value"])
            writer.writerows(rows)
        os.replace(tmp, rd.metrics_path)
        return rd

    def write_text(self, name: str, text: str) -> None:
        """Write a small file of the run atomically (rename over the old one).

        A failed write (a full or read-only disk) leaves no temporary file and raises a
        one-line :class:`UserError` naming the file and the errno.
        """
        target = self.path / name
        tmp = target.with_name(f".{name}.tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise write_error(target, exc) from None

    def write_json(self, name: str, data: Any) -> None:
        self.write_text(name, json.dumps(data, indent=2, default=str) + "\n")

    def log(self, step: int, epoch: int, split: str, name: str, value: float) -> None:
        """Record one metric value; appended to metrics.csv on flush (each log point)."""
        self.rows.append((step, epoch, split, name, float(value)))

    def flush(self) -> None:
        try:
            self.rows.flush()
        except OSError as exc:
            raise write_error(self.metrics_path, exc) from None

    def write_summary(self, summary: dict[str, Any]) -> None:
        self.write_json("summary.json", summary)

    def plot_curves(self) -> None:
        """curves.png: loss (train and val), the other metrics, and the learning rate."""
        plot_curves(self.rows, self.path / "curves.png")


class CsvLogger:
    """``metrics.csv`` as a logger: ``split/name`` metrics become (step, epoch, split, name,
    value) rows of the run directory, in the order given.

    Example:
        >>> import tempfile
        >>> run = RunDir.create(Path(tempfile.mkdtemp()) / "run")
        >>> CsvLogger(run, epoch=lambda: 0).log_metrics(10, {"train/loss": 0.5})
        >>> run.metrics_path.read_text().splitlines()[1]  # written at once: tail -f shows it
        '10,0,train,loss,0.5'
    """

    def __init__(self, run: RunDir, epoch: Callable[[], int]) -> None:
        self.run = run
        self._epoch = epoch

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        epoch, log = self._epoch(), self.run.log
        for key, value in metrics.items():
            split, _, name = key.partition("/")
            log(step, epoch, split, name, value)
        # Each log point (and evaluation) reaches the file now, not at the epoch's end.
        self.run.flush()


class NullRunDir(RunDir):
    """What ranks other than 0 hold: the run's path, and writes that do nothing."""

    def write_text(self, name: str, text: str) -> None:
        pass

    def log(self, step: int, epoch: int, split: str, name: str, value: float) -> None:
        pass

    def flush(self) -> None:
        pass

    def plot_curves(self) -> None:
        pass


def refuse_dangling(path: Path) -> None:
    """A ``run.dir`` that is a symbolic link to nothing: one line saying so (``mkdir``
    would only say "File exists").

    Example:
        >>> refuse_dangling(Path("no/such/run"))  # not a link: nothing to say
    """
    if path.is_symlink() and not path.exists():
        raise UserError(
            f"run.dir: {path} is a symbolic link to {os.readlink(path)}, which does not exist; "
            "create its target, or point run.dir elsewhere"
        )


def write_error(path: Path, exc: OSError) -> UserError:
    """One line for a file the run could not write: the path, the reason, the errno."""
    code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return UserError(f"could not write {path}: {exc.strerror or exc} ({code})")


def _read_status(summary: Path) -> str:
    try:
        return str(json.loads(summary.read_text()).get("status", "unknown"))
    except (OSError, ValueError, AttributeError):
        return "unreadable"


def _is_model_metric(name: str) -> bool:
    # Memory, timings and throughput describe the machine; they have their own scales.
    return name not in ("loss", "lr", "samples_per_s") and not name.startswith(("mem/", "time/"))


def plot_curves(rows: Iterable[tuple[int, int, str, str, float]], out: Path) -> None:
    """Plot metric rows (step, epoch, split, name, value) into three panels."""
    # A Figure on its own Agg canvas: no pyplot (no display, no global figure registry to
    # close), and fixed margins instead of tight_layout, whose extra draw pass cost a
    # quarter of the plot, at every run's end.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
    for step, _epoch, split, name, value in rows:
        xs, ys = series.setdefault((split, name), ([], []))
        xs.append(step)
        ys.append(value)
    fig = Figure(figsize=(15, 4))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.13, top=0.92, wspace=0.25)
    panels = [
        (axes[0], "loss", lambda s, n: n == "loss"),
        (axes[1], "metrics", lambda s, n: _is_model_metric(n) and s != "test"),
        (axes[2], "learning rate", lambda s, n: n == "lr"),
    ]
    for ax, title, wanted in panels:
        for (split, name), (xs, ys) in sorted(series.items()):
            if wanted(split, name):
                ax.plot(xs, ys, marker="o" if len(xs) < 50 else None, label=f"{split}/{name}")
        ax.set_title(title)
        ax.set_xlabel("optimizer step")
        if ax.lines:
            ax.legend()
    # Through a temporary file: a full disk must not leave a truncated curves.png.
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        fig.savefig(tmp, dpi=100, format="png")
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
