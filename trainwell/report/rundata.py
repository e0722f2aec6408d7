"""Read one run directory into plain data, torch-free and forgiving.

A run directory may be half-written (a run still going, a crash mid-line, a folder copied
without its checkpoints): whatever can be read is read, and each problem becomes one
line in :attr:`Run.notes` so the report can say it is partial instead of failing.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwell.errors import UserError
from trainwell.flock import lock_state
from trainwell.report.checkpoints import Checkpoint, list_checkpoints

# The files that make a folder a run directory (DESIGN.md, "Run directory").
RUN_FILES = ("summary.json", "metrics.csv", "config.yaml")
STATUSES = ("running", "completed", "failed", "interrupted", "stopped")
# `stopped`: the summary says running, but no process holds the run (see live_status).
# doctor.json codes that name the memory verdict marked on the memory timeline.
LEAK_CODES = ("graph-retained", "tensor-accumulation", "retain-graph", "eval-builds-graph")
FRAGMENTATION_CODES = ("allocator-fragmentation",)


@dataclass
class Series:
    """One metric over optimizer steps: ``split/name`` (``train/loss``, ``train/mem/rss_mb``)."""

    split: str
    name: str
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.split}/{self.name}"


@dataclass
class Run:
    """What a report shows of one run directory.

    Example:
        >>> run = Run(Path("runs/a"), "a", status="completed")
        >>> run.partial
        False
    """

    path: Path
    name: str
    status: str = "unknown"
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    config_text: str = ""
    env: dict[str, Any] = field(default_factory=dict)
    series: dict[str, Series] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    doctor_ran: bool = False
    checkpoints: list[Checkpoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        """True when something could not be read, or the run is not over."""
        return bool(self.notes) or self.status in ("running", "unknown", "stopped")

    def latest(self) -> dict[str, float]:
        """The last logged value of every metric (``val/accuracy`` -> 0.97)."""
        return {key: s.values[-1] for key, s in self.series.items() if s.values}

    def memory_verdict(self) -> tuple[str, list[dict[str, Any]]]:
        """``("leak" | "fragmentation" | "clean" | "unknown", the findings behind it)``."""
        leak = [f for f in self.findings if f.get("code") in LEAK_CODES]
        frag = [f for f in self.findings if f.get("code") in FRAGMENTATION_CODES]
        if leak:
            return "leak", leak
        if frag:
            return "fragmentation", frag
        return ("clean" if self.doctor_ran else "unknown"), []


def is_run_dir(path: Path) -> bool:
    """A folder holding at least one of a run's own files.

    Example:
        >>> is_run_dir(Path("/"))
        False
    """
    return path.is_dir() and any((path / name).is_file() for name in RUN_FILES)


def load_run(path: str | os.PathLike[str]) -> Run:
    """Read a run directory; raises :class:`UserError` for a folder that is not a run.

    Example:
        >>> load_run("/")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: / is not a run directory (it has no summary.json, ...)
    """
    folder = Path(path)
    if not folder.exists():
        raise UserError(f"{folder} does not exist")
    if not is_run_dir(folder):
        raise UserError(
            f"{folder} is not a run directory (it has no summary.json, metrics.csv or "
            "config.yaml)"
        )
    run = Run(folder, folder.resolve().name or str(folder))
    run.summary = _read_json(folder / "summary.json", run.notes, required=True)
    run.env = _read_json(folder / "env.json", run.notes)
    run.config, run.config_text = _read_config(folder / "config.yaml", run.notes)
    run.series = read_metrics(folder / "metrics.csv", run.notes)
    _read_doctor(run)
    run.checkpoints = list_checkpoints(folder / "checkpoints", run.notes)
    run.status = _status(run)
    return run


def _status(run: Run) -> str:
    status = live_status(run.path, str(run.summary.get("status", "unknown")))
    if status not in STATUSES:
        return "unknown"
    if status == "stopped":
        run.notes.append(
            "summary.json says running but no process holds the run: it stopped without a "
            "word (killed, or its machine went down); resume it with --resume auto"
        )
    return status


def live_status(folder: Path, status: str) -> str:
    """``stopped`` for a summary that says ``running`` while no process holds the run's
    lock (killed with SIGKILL, out of memory, power cut); else ``status`` as written.

    The lock, not the pid in ``.lock``, is asked: the kernel drops a lock with its holder,
    while a pid is soon another process's. Without a lock file (a run of an older version,
    a system without flock) the summary's word stands.

    Example:
        >>> import tempfile
        >>> live_status(Path(tempfile.mkdtemp()), "running")  # no lock file: as written
        'running'
    """
    if status == "running" and lock_state(folder) == "free":
        return "stopped"
    return status


def _read_json(path: Path, notes: list[str], required: bool = False) -> dict[str, Any]:
    if not path.exists():
        if required:
            notes.append(f"{path.name} is missing")
        return {}
    try:
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError) as exc:
        notes.append(f"{path.name} is unreadable ({type(exc).__name__}); left out")
        return {}
    if not isinstance(data, dict):
        notes.append(f"{path.name} does not hold a JSON object; left out")
        return {}
    return data


def _read_config(path: Path, notes: list[str]) -> tuple[dict[str, Any], str]:
    if not path.exists():
        notes.append("config.yaml is missing")
        return {}, ""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        notes.append(f"config.yaml is unreadable ({exc.strerror})")
        return {}, ""
    import yaml  # a core dependency; imported here so that listing runs stays light

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        notes.append("config.yaml is not valid YAML; shown as text only")
        return {}, text
    return (data if isinstance(data, dict) else {}), text


def read_metrics(path: Path, notes: list[str]) -> dict[str, Series]:
    """metrics.csv as series keyed ``split/name``, in file order of first appearance.

    A row cut by a crash (too few fields, a number cut in half) is skipped with a note.

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "metrics.csv"
        >>> _ = p.write_text("step,epoch,split,name,value\\n1,0,train,loss,2.5\\n2,0,tra")
        >>> notes = []
        >>> read_metrics(p, notes)["train/loss"].values, notes
        ([2.5], ['metrics.csv: line 3 is cut or malformed (skipped): 2,0,tra'])
    """
    series: dict[str, Series] = {}
    if not path.exists():
        notes.append("metrics.csv is missing: no curves")
        return series
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        notes.append(f"metrics.csv is unreadable ({exc.strerror}): no curves")
        return series
    bad: list[tuple[int, str]] = []
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if number == 1 and row[:2] == ["step", "epoch"]:
            continue
        parsed = _parse_row(row)
        if parsed is None:
            if row:
                bad.append((number, ",".join(row)))
            continue
        step, split, name, value = parsed
        s = series.setdefault(f"{split}/{name}", Series(split, name))
        s.steps.append(step)
        s.values.append(value)
    for number, line in bad[:3]:
        notes.append(f"metrics.csv: line {number} is cut or malformed (skipped): {line[:60]}")
    if len(bad) > 3:
        notes.append(f"metrics.csv: {len(bad) - 3} more malformed lines skipped")
    return series


def _parse_row(row: list[str]) -> tuple[int, str, str, float] | None:
    if len(row) != 5 or not row[2] or not row[3]:
        return None
    try:
        return int(row[0]), row[2], row[3], float(row[4])
    except ValueError:
        return None


def _read_doctor(run: Run) -> None:
    path = run.path / "doctor.json"
    if not path.exists():
        return
    data = _read_json(path, run.notes)
    findings = data.get("findings")
    if not isinstance(findings, list):
        if data:
            run.notes.append("doctor.json has no list of findings; left out")
        return
    run.doctor_ran = True
    run.findings = [_finding(f) for f in findings if isinstance(f, dict)]
    if len(run.findings) != len(findings):
        run.notes.append("doctor.json: some findings are not objects; left out")


def _finding(raw: dict[str, Any]) -> dict[str, Any]:
    """A finding with every field the page shows, whatever the file left out."""
    related = raw.get("related")
    if not isinstance(related, list):
        related = []
    evidence = raw.get("evidence")
    return {
        "code": str(raw.get("code", "?")),
        "severity": str(raw.get("severity", "info")),
        "file": str(raw.get("file", "?")),
        "line": raw.get("line", "?"),
        "message": str(raw.get("message", "")),
        "why": str(raw.get("why", "")),
        "fix": str(raw.get("fix", "")),
        "related": [r for r in related if isinstance(r, dict)],
        "evidence": evidence if isinstance(evidence, dict) else {},
    }


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; lists and scalars are leaves.

    Example:
        >>> flatten({"optim": {"lr": 0.1, "betas": [0.9, 0.99]}, "seed": 0})
        {'optim.lr': 0.1, 'optim.betas': [0.9, 0.99], 'seed': 0}
    """
    if not isinstance(data, dict):
        return {prefix: data} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):  # an empty one adds no key: {} and unset compare equal
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out
