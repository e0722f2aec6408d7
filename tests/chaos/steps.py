"""Steps the chaos cases share: the reference run, resuming until done, striking a run
at a planned instant."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.chaos.harness import (
    BASE,
    STEPS_PER_EPOCH,
    CaseError,
    Ctx,
    Proc,
    observed,
    status,
    temporaries,
    wait_for,
)

SIGNAL_EXIT = {signal.SIGTERM: 143, signal.SIGINT: 130}


# --------------------------------------------------------------------------- shared steps


def start_reference(ctx: Ctx, overrides: list[str]) -> tuple[Proc, Path]:
    """The uninterrupted run of the same config, in the background."""
    ref = ctx.dir / "ref"
    return ctx.launch("train", *BASE, *overrides, f"run.dir={ref}", name="reference"), ref


def finish_reference(proc: Proc) -> None:
    if proc.wait(300) != 0 or "Traceback" in proc.stderr:
        raise CaseError(f"the uninterrupted reference run failed: {observed(proc)}")


def train_args(
    run: Path, overrides: list[str], resume: str | None = "auto", base: list[str] = BASE
) -> list[str]:
    args = ["train", *base, *overrides, f"run.dir={run}"]
    return [*args, "--resume", resume] if resume else args


def make_run_inprocess(run: Path, overrides: list[str]) -> None:
    """A finished run made by ``trainwell.fit`` in this process (a base to attack)."""
    from rich.console import Console

    import trainwell
    from trainwell.config import load_config

    cfg = load_config(overrides=[*BASE, *overrides, f"run.dir={run}"])
    trainwell.fit(cfg, console=Console(quiet=True))


def resume_until_done(ctx: Ctx, run: Path, overrides: list[str], problems: list[str],
                      tries: int = 3) -> None:  # fmt: skip
    """``--resume auto`` until the run completes (or a resume fails)."""
    for _ in range(tries):
        proc = ctx.run(*train_args(run, overrides), name="resume", timeout=180)
        if proc.code != 0 or "Traceback" in proc.stderr:
            problems.append(f"resume failed: {observed(proc, run)}")
            return
        if status(run) == "completed":
            return
    problems.append(f"still not completed after {tries} resumes: status {status(run)!r}")


def opened_by(proc: Proc, run: Path) -> Callable[[], bool]:
    """True once ``proc`` has (re)written the run's summary: it is about to train."""

    def check() -> bool:
        try:
            return (run / "summary.json").stat().st_mtime >= proc.started
        except OSError:
            return False

    return check


def _total_steps(overrides: list[str]) -> int:
    """The run's optimizer steps (train.epochs x 14); the kill plans need step-{total}.pt,
    so checkpoint.every_steps must divide it."""
    epochs = int(next(o for o in overrides if o.startswith("train.epochs=")).split("=")[1])
    total = epochs * STEPS_PER_EPOCH
    every = [int(o.split("=")[1]) for o in overrides if o.startswith("checkpoint.every_steps=")]
    assert every and total % every[0] == 0, "the last step must write a step-N.pt"
    return total


@dataclass
class Hit:
    """Where a signal landed: ``what`` (for the report), whether the last optimizer step
    was already taken, and whether the run already said 'completed'."""

    what: str
    after_last: bool
    completed_before: bool

    def __str__(self) -> str:
        return self.what


def strike(ctx: Ctx, proc: Proc, run: Path, plan: str, total: int, sig: int) -> Hit | None:
    """Wait for the instant ``plan`` names, then send ``sig``. Returns where it landed, or
    None if the process ended first."""
    folder = run / "checkpoints"
    rng = ctx.rng
    if plan == "startup":  # somewhere in imports, building, opening the run
        time.sleep(rng.uniform(0.2, 2.5))
        what = "startup"
    elif plan == "random":  # somewhere in training, sometimes in the run's finishing
        if not wait_for(opened_by(proc, run), proc):
            return None
        delay = rng.uniform(0.0, 0.25) if rng.random() < 0.75 else rng.uniform(0.25, 2.0)
        time.sleep(delay)
        what = f"random +{delay:.3f}s"
    elif plan == "tmp":  # while a checkpoint is being written
        if not wait_for(lambda: bool(temporaries(folder)), proc):
            return None
        what = "write"
    elif plan == "last":  # right after the very last optimizer step
        if not wait_for(lambda: (folder / f"step-{total}.pt").exists(), proc):
            return None
        what = f"step-{total}.pt"
    elif plan == "finishing":  # after training, while the run is being finished
        if not wait_for(lambda: (folder / f"step-{total}.pt").exists(), proc):
            return None
        time.sleep(0.3)
        what = "finishing (after the last step)"
    else:
        raise ValueError(plan)
    # The run's plan makes step-{total}.pt the mark of the last optimizer step.
    after_last = (folder / f"step-{total}.pt").exists()
    completed_before = status(run) == "completed" and proc.started < _mtime(run)
    if not proc.send(sig):
        return None
    if sig == signal.SIGKILL:
        proc.wait(60)
        if plan == "tmp":
            what += " (mid-write)" if temporaries(folder) else " (after the rename)"
    ctx.say(f"{signal.Signals(sig).name} at {what}")
    return Hit(what, after_last, completed_before)


def _mtime(run: Path) -> float:
    try:
        return (run / "summary.json").stat().st_mtime
    except OSError:
        return 0.0
