"""The chaos harness: real ``trainwell`` processes, real signals, and the checks on what
they leave behind.

Every process is started in its own session (its own process group) with stdout and
stderr going to files in the case's folder, so the harness can watch the run directory
while it trains, signal exactly the process it started, and read what it printed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import REPO, SYNTHETIC, is_machine_metric

PYTHON = sys.executable

# The tiny CPU run every case trains, the suite's own: 512 samples (460 train after the
# 10% validation split), batch 32, so 14 optimizer steps per epoch.
BASE = [*SYNTHETIC, "train.precision=fp32"]
STEPS_PER_EPOCH = 14


class CaseError(Exception):
    """The case could not run as planned (a timeout, a harness problem): it fails."""


@dataclass
class Outcome:
    """What a case found: passed, failed (with the reason) or skipped (with the reason)."""

    ok: bool
    reason: str
    skipped: bool = False

    @property
    def label(self) -> str:
        return "SKIP" if self.skipped else ("PASS" if self.ok else "FAIL")


def passed(reason: str = "") -> Outcome:
    return Outcome(True, reason)


def failed(reason: str) -> Outcome:
    return Outcome(False, reason)


def skipped(reason: str) -> Outcome:
    return Outcome(True, reason, skipped=True)


def verdict(problems: list[str], notes: Iterable[str] = ()) -> Outcome:
    """Failed with every problem found, else passed with the notes."""
    notes = [n for n in notes if n]
    if problems:
        return failed("; ".join(problems) + (f" [{'; '.join(notes)}]" if notes else ""))
    return passed("; ".join(notes))


# --------------------------------------------------------------------------- processes


@dataclass
class Proc:
    """A ``python -m trainwell ...`` process, its output in files."""

    popen: subprocess.Popen
    name: str
    out_path: Path
    err_path: Path
    started: float

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float) -> int:
        """The exit code; a process still running after ``timeout`` is killed and fails the
        case."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            raise CaseError(
                f"{self.name}: still running after {timeout:.0f}s (killed); "
                f"stderr: {last_line(self.stderr)!r}"
            ) from None

    def send(self, sig: int) -> bool:
        """Send ``sig`` to this process (not its children); False if it had already ended."""
        if self.popen.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, sig)
            return True
        return False

    def kill_group(self) -> None:
        """SIGKILL this process and whatever it started (its own process group)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    @property
    def stdout(self) -> str:
        return _read(self.out_path)

    @property
    def stderr(self) -> str:
        return _read(self.err_path)

    @property
    def code(self) -> int | None:
        return self.popen.returncode


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _model_rows(path: Path) -> str:
    lines = _read(path).splitlines(keepends=True)
    return "".join(ln for ln in lines if not is_machine_metric((ln.split(",") + [""] * 4)[3]))


@dataclass
class Ctx:
    """One case's world: its own folder, random stream and processes."""

    dir: Path
    rng: random.Random
    full: bool = True
    verbose: bool = False
    procs: list[Proc] = field(default_factory=list)
    mounts: list[Path] = field(default_factory=list)
    _n: int = 0

    @property
    def logs(self) -> Path:
        path = self.dir / "_logs"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def say(self, message: str) -> None:
        if self.verbose:
            print(f"    [{self.dir.name}] {message}", flush=True)

    def launch(self, *args: str, name: str = "", env: dict[str, str] | None = None) -> Proc:
        """Start ``python -m trainwell ARGS`` in the case's folder."""
        self._n += 1
        name = f"{self._n:02d}-{name or args[0]}"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINWELL_TEST")}
        full_env.update(
            PYTHONPATH=os.pathsep.join([str(REPO), str(self.dir)]),
            COLUMNS="400",  # rich wraps at the terminal width: keep the resume hint whole
            PYTHONUNBUFFERED="1",
            **(env or {}),
        )
        out_path, err_path = self.logs / f"{name}.out", self.logs / f"{name}.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            popen = subprocess.Popen(
                [PYTHON, "-m", "trainwell", *args],
                cwd=self.dir,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own group: our signals reach it alone
            )
        proc = Proc(popen, name, out_path, err_path, time.time())
        self.procs.append(proc)
        self.say(f"launched {name} (pid {proc.pid}): {' '.join(args[-4:])}")
        return proc

    def run(self, *args: str, name: str = "", timeout: float = 180, **kw: Any) -> Proc:
        """Run ``python -m trainwell ARGS`` to its end."""
        proc = self.launch(*args, name=name, **kw)
        proc.wait(timeout)
        self.say(f"{proc.name} exited {proc.code}: {last_line(proc.stderr)!r}")
        return proc

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.alive:
                proc.kill_group()
        for mount in reversed(self.mounts):
            umount(mount)


def wait_for(
    predicate: Callable[[], bool],
    proc: Proc | None = None,
    timeout: float = 120,
    interval: float = 0.0003,
) -> bool:
    """Poll ``predicate`` until it holds (True), or ``proc`` ends or time runs out (False)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        if proc is not None and not proc.alive:
            return predicate()
        time.sleep(interval)
    return False


# --------------------------------------------------------------------------- run folders


def temporaries(folder: Path) -> list[str]:
    """Names of ``.*.tmp`` files in ``folder`` (a checkpoint or file being written)."""
    try:
        with os.scandir(folder) as it:
            return [e.name for e in it if e.name.startswith(".") and e.name.endswith(".tmp")]
    except OSError:
        return []


def all_temporaries(run: Path) -> list[str]:
    """Every ``*.tmp`` file anywhere under a run directory, relative names."""
    if not run.exists():
        return []
    return sorted(str(p.relative_to(run)) for p in run.rglob("*.tmp"))


def summary(run: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def status(run: Path) -> str | None:
    s = summary(run)
    return None if s is None else str(s.get("status"))


def step_files(run: Path) -> list[int]:
    folder = run / "checkpoints"
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    steps = []
    for n in names:
        if n.startswith("step-") and n.endswith(".pt"):
            with contextlib.suppress(ValueError):
                steps.append(int(n[5:-3]))
    return sorted(steps)


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative path -> digest)."""
    out = {}
    if root.exists():
        for p in sorted(root.rglob("*")):
            if p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def tree_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    changed = [k for k in before if k in after and before[k] != after[k]]
    gone = [k for k in before if k not in after]
    new = [k for k in after if k not in before]
    out = []
    if changed:
        out.append(f"changed {changed}")
    if gone:
        out.append(f"removed {gone}")
    if new:
        out.append(f"added {new}")
    return out


def load(path: Path) -> dict[str, Any]:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def same_tensors(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """None if the two state dicts hold bit-identical tensors, else what differs."""
    import torch

    if a.keys() != b.keys():
        return f"keys differ: {sorted(set(a) ^ set(b))[:4]}"
    for k in a:
        if not torch.equal(a[k], b[k]):
            return f"tensor {k!r} differs"
    return None


def compare_runs(run: Path, ref: Path, *, test: bool = False) -> list[str]:
    """How ``run`` differs from the uninterrupted reference ``ref`` (empty: identical).

    last.pt and best.pt weights bit for bit (and best.pt's step), metrics.csv byte for
    byte, summary final (and best, and test with ``test=True``), status completed, no
    temporary file left.
    """
    problems = []
    st = status(run)
    if st != "completed":
        problems.append(f"summary status {st!r}, not 'completed'")
    for name in ("last.pt", "best.pt"):
        try:
            mine = load(run / "checkpoints" / name)
        except Exception as exc:
            problems.append(f"{name} unreadable ({type(exc).__name__}: {first_line(exc)})")
            continue
        theirs = load(ref / "checkpoints" / name)
        diff = same_tensors(mine.get("model", {}), theirs["model"])
        if diff:
            problems.append(f"{name} weights differ from the reference: {diff}")
        if mine.get("step") != theirs.get("step"):
            problems.append(f"{name} step {mine.get('step')} vs reference {theirs.get('step')}")
    # The machine's rows (memory, throughput) differ between any two runs; the model's may not.
    mine_csv, ref_csv = _model_rows(run / "metrics.csv"), _model_rows(ref / "metrics.csv")
    if mine_csv != ref_csv:
        problems.append(f"metrics.csv differs: {first_difference(mine_csv, ref_csv)}")
    s, r = summary(run) or {}, summary(ref) or {}
    keys = ["final", "best", *(["test"] if test else [])]
    for key in keys:
        if s.get(key) != r.get(key):
            problems.append(f"summary {key} {s.get(key)} vs reference {r.get(key)}")
    left = all_temporaries(run)
    if left:
        problems.append(f"temporary files left: {left}")
    return problems


def first_difference(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}: {x!r} vs reference {y!r}"
    if len(la) != len(lb):
        i = min(len(la), len(lb))
        extra = (la[i] if len(la) > i else lb[i]) if max(len(la), len(lb)) > i else ""
        return f"{len(la)} lines vs reference {len(lb)} (first extra: {extra!r})"
    return "same lines, different bytes (line endings?)"


# --------------------------------------------------------------------------- output checks


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip()[:300] if lines else ""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def one_line_error(proc: Proc, code: int = 2) -> str | None:
    """None if ``proc`` exited ``code`` with exactly one line ``trainwell: error: ...`` on
    stderr and no traceback; else what it did instead."""
    err = proc.stderr
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    what = f"exit {proc.code}, stderr last line {last_line(err)!r}"
    if "Traceback (most recent call last)" in err:
        return f"traceback ({what})"
    if proc.code != code:
        return f"expected exit {code}: {what}"
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr, not one ({what})"
    if not lines[0].startswith("trainwell: error: "):
        return f"stderr is not 'trainwell: error: ...' ({what})"
    return None


def observed(proc: Proc, run: Path | None = None) -> str:
    """exit code, stderr's last line and the run's status, for a failure's reason."""
    text = f"exit {proc.code}, stderr {last_line(proc.stderr)!r}"
    if run is not None:
        text += f", summary status {status(run)!r}"
    return text


def flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return text.replace("\n", "")


# --------------------------------------------------------------------------- tmpfs


def mount_tmpfs(ctx: Ctx, name: str, size: str = "2M") -> tuple[Path | None, str]:
    """A small tmpfs at ``ctx.dir/name``; (None, why) when it cannot be mounted."""
    path = ctx.dir / name
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return None, "not root: cannot mount a tmpfs"
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return None, f"mount -t tmpfs failed: {last_line(proc.stderr) or proc.returncode}"
    ctx.mounts.append(path)
    return path, ""


def remount(path: Path, mode: str) -> str:
    proc = subprocess.run(
        ["mount", "-o", f"remount,{mode}", str(path)], capture_output=True, text=True
    )
    return "" if proc.returncode == 0 else f"remount {mode} failed: {last_line(proc.stderr)}"


def umount(path: Path) -> None:
    for _ in range(20):
        proc = subprocess.run(["umount", str(path)], capture_output=True, text=True)
        if proc.returncode == 0 or "not mounted" in proc.stderr:
            return
        time.sleep(0.25)  # still busy: a process of ours is being reaped


def fill(folder: Path, leave: int) -> int:
    """Fill the filesystem of ``folder`` until about ``leave`` bytes are free; returns the
    bytes free afterwards."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    with open(folder / "filler", "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize
