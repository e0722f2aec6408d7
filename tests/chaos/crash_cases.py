"""Chaos cases that stop a run: SIGKILL, SIGTERM/SIGINT, the last step, two processes,
a torn last.pt, a DDP worker that dies. Each ``(ctx, **params) -> Outcome``."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

from tests import crash_at
from tests.chaos.harness import (
    BASE,
    CaseError,
    Ctx,
    Outcome,
    all_temporaries,
    compare_runs,
    flat,
    last_line,
    load,
    observed,
    one_line_error,
    status,
    step_files,
    temporaries,
    verdict,
    wait_for,
)
from tests.chaos.steps import (
    SIGNAL_EXIT,
    Hit,
    _total_steps,
    finish_reference,
    resume_until_done,
    start_reference,
    strike,
    train_args,
)

# --------------------------------------------------------------------------- 1. SIGKILL


KILL_RUN = ["train.epochs=6", "train.log_every=5", "checkpoint.every_steps=4",
            "checkpoint.keep_last=2"]  # fmt: skip  # 84 steps, a step-N every 4


def sigkill_resume(ctx: Ctx, plans: list[str], overrides: list[str] | None = None) -> Outcome:
    """SIGKILL at the planned instants, ``--resume auto`` until done; identical to the
    uninterrupted run."""
    overrides = overrides or KILL_RUN
    total = _total_steps(overrides)
    ref_proc, ref = start_reference(ctx, overrides)
    run = ctx.dir / "run"
    hits: list[Hit | str] = []
    problems: list[str] = []
    for plan in plans:
        proc = ctx.launch(*train_args(run, overrides), name=f"kill-{plan}")
        hit = strike(ctx, proc, run, plan, total, signal.SIGKILL)
        if hit is None:
            proc.wait(180)
            hits.append(f"{plan}: missed (exit {proc.code})")
            if proc.code != 0:
                problems.append(f"a launch after a kill failed: {observed(proc, run)}")
                break
            if status(run) == "completed":
                break
            continue
        hits.append(hit)
    if not problems:
        resume_until_done(ctx, run, overrides, problems)
    finish_reference(ref_proc)
    if not problems:
        problems += compare_runs(run, ref)
    landed = sum(isinstance(h, Hit) and not h.completed_before for h in hits)
    if landed == 0:
        problems.append("harness: no kill landed before the run ended")
    return verdict(problems, [f"kills: {', '.join(map(str, hits))}"])


# --------------------------------------------------------------------------- 2. SIGTERM/INT


def signal_resume(ctx: Ctx, sig: int, plan: str) -> Outcome:
    """SIGTERM/SIGINT: exit 128+sig, status interrupted, hint printed; resume identical."""
    overrides = KILL_RUN
    total = _total_steps(overrides)
    ref_proc, ref = start_reference(ctx, overrides)
    problems: list[str] = []
    notes: list[str] = []
    for attempt in range(1, 4):  # a signal that came after the end lands nowhere: again
        run = ctx.dir / f"run-{attempt}"
        proc = ctx.launch(*train_args(run, overrides, resume=None), name=f"{plan}-{attempt}")
        hit = strike(ctx, proc, run, plan, total, sig)
        proc.wait(120)
        if hit is None or hit.completed_before:
            notes.append(f"attempt {attempt}: the run ended before the signal")
            continue
        notes.append(f"{signal.Signals(sig).name} at {hit}")
        expected = SIGNAL_EXIT[sig]
        st = status(run)
        if proc.code == 0 and st == "completed":
            if not hit.after_last:
                problems.append(f"the {signal.Signals(sig).name} during training was ignored: "
                                "exit 0, status 'completed'")  # fmt: skip
            else:  # it came after the last step; finishing the run is a fair answer
                notes.append("the run finished its last steps: exit 0, completed")
            break
        if proc.code != expected:
            problems.append(f"expected exit {expected}: {observed(proc, run)}")
        if st != "interrupted":
            problems.append(f"summary status {st!r}, not 'interrupted'")
        if "Traceback" in proc.stderr:
            problems.append(f"traceback on stderr: {last_line(proc.stderr)!r}")
        if f"run.dir={run} --resume auto" not in flat(proc.stdout):
            problems.append("no resume hint ('run.dir=... --resume auto') printed")
        resume_until_done(ctx, run, overrides, problems)
        break
    else:
        raise CaseError("the signal never landed while the run was running")
    finish_reference(ref_proc)
    if not any(p.startswith("resume failed") for p in problems):
        problems += compare_runs(run, ref)
    return verdict(problems, notes)


# --------------------------------------------------------------------------- 3. max_steps


def max_steps_kill(ctx: Ctx, when: str) -> Outcome:
    """max_steps=12 with step-12.pt: SIGKILL, resume auto, equal to the uninterrupted run."""
    overrides = ["train.max_steps=12", "checkpoint.every_steps=12"]
    ref_proc, ref = start_reference(ctx, overrides)
    run = ctx.dir / "run"
    folder = run / "checkpoints"
    proc = ctx.launch(*train_args(run, overrides), name="kill")
    predicates = {
        "step-12": lambda: (folder / "step-12.pt").exists(),
        "last.pt": lambda: (folder / "step-12.pt").exists() and (folder / "last.pt").exists(),
    }
    problems: list[str] = []
    notes = []
    if wait_for(predicates[when], proc) and proc.send(signal.SIGKILL):
        proc.wait(60)
        notes.append(f"killed once {when} existed; then on disk: "
                     f"{sorted(os.listdir(folder))}")  # fmt: skip
    else:
        proc.wait(120)
        raise CaseError(f"the run ended before the kill: {observed(proc, run)}")
    resume_until_done(ctx, run, overrides, problems)
    finish_reference(ref_proc)
    if not problems:
        problems += compare_runs(run, ref, test=True)
    return verdict(problems, notes)


# --------------------------------------------------------------------------- 5. two processes


def two_processes(ctx: Ctx, second: str) -> Outcome:
    """A second process into a run dir in use is refused naming the holder's pid; after
    SIGKILL of the holder, a new one is accepted."""
    long = ["train.epochs=3000"]
    run = ctx.dir / "run"
    first = ctx.launch(*train_args(run, long, resume=None), name="holder")
    if not wait_for(lambda: (run / "checkpoints" / "last.pt").exists(), first, timeout=120):
        first.wait(5)
        raise CaseError(f"the first run did not start training: {observed(first, run)}")
    resume = "auto" if second == "resume" else None
    intruder = ctx.run(*train_args(run, long, resume=resume), name="intruder", timeout=60)
    problems = []
    notes = [f"holder pid {first.pid}", f"second: {observed(intruder)}"]
    if not first.alive:
        problems.append(f"the holder died while the second process ran: {observed(first)}")
    bad = one_line_error(intruder)
    if bad:
        problems.append(f"second process not refused in one line: {bad}")
    elif second == "resume" and str(first.pid) not in intruder.stderr:
        problems.append(f"the refusal does not name the holder's pid {first.pid}: "
                        f"{last_line(intruder.stderr)!r}")  # fmt: skip
    first.send(signal.SIGKILL)
    first.wait(30)
    # The holder is gone (its lock, if any, is stale): a new process is accepted.
    third = ctx.launch(*train_args(run, long), name="after-kill")
    began = wait_for(lambda: "resuming from" in third.stdout, third, timeout=120)
    if began:
        notes.append("after the kill: accepted")
        third.send(signal.SIGTERM)
        third.wait(60)
    else:
        third.wait(60)
        problems.append(f"after SIGKILL of the holder, a new process was not accepted: "
                        f"{observed(third, run)}")  # fmt: skip
    return verdict(problems, notes)


# --------------------------------------------------------------------------- 6. torn last.pt


TORN_RUN = ["train.epochs=6", "train.log_every=5", "checkpoint.keep_last=100"]


def torn_last(ctx: Ctx, every: int, kill_when: str) -> Outcome:
    """Truncated last.pt, good best.pt and step-N: resume auto takes the newest usable
    checkpoint, best.pt is never replaced by a worse one, the end equals the reference."""
    overrides = [*TORN_RUN, f"checkpoint.every_steps={every}"]
    ref_proc, ref = start_reference(ctx, overrides)
    run = ctx.dir / "run"
    folder = run / "checkpoints"

    def last_newer_than_steps() -> bool:  # an epoch end after the newest step-N
        try:
            steps = step_files(run)
            if not steps or steps[-1] >= 40:
                return False
            newest = (folder / f"step-{steps[-1]}.pt").stat().st_mtime_ns
            return (folder / "last.pt").stat().st_mtime_ns > newest and steps[-1] >= 20
        except OSError:
            return False

    predicates = {"step-40": lambda: (folder / "step-40.pt").exists(),
                  "epoch-end": last_newer_than_steps}  # fmt: skip
    proc = ctx.launch(*train_args(run, overrides), name="kill")
    if not (wait_for(predicates[kill_when], proc, interval=0.0001)
            and proc.send(signal.SIGKILL)):  # fmt: skip
        proc.wait(120)
        raise CaseError(f"the run ended before the kill: {observed(proc, run)}")
    proc.wait(60)
    for tmp in temporaries(folder):  # a torn last.pt is the point, not a torn temporary
        (folder / tmp).unlink()
    best_before = load(folder / "best.pt") if (folder / "best.pt").exists() else None
    usable = {p.name: int(load(p)["step"]) for p in folder.glob("*.pt") if p.name != "last.pt"}
    data = (folder / "last.pt").read_bytes()
    (folder / "last.pt").write_bytes(data[: len(data) // 2])
    future = time.time() + 30
    os.utime(folder / "last.pt", (future, future))  # the torn one is the newest
    proc = ctx.run(*train_args(run, overrides), name="resume")
    problems: list[str] = []
    notes = [f"usable before resume: {usable}"]
    out = flat(proc.stdout)
    if proc.code != 0:
        problems.append(f"resume failed: {observed(proc, run)}")
    if not re.search(r"skipping unusable checkpoint.*last\.pt", out):
        problems.append("no 'skipping unusable checkpoint ... last.pt' message")
    m = re.search(r"resuming from (\S+) at step (\d+)", out)
    newest_step = max((s for n, s in usable.items() if n.startswith("step-")), default=-1)
    if m is None:
        problems.append("no 'resuming from ... at step N' line")
    else:
        notes.append(f"resumed from {Path(m.group(1)).name} at step {m.group(2)}")
        if int(m.group(2)) < newest_step:
            problems.append(f"resumed at step {m.group(2)}, not from the newest usable "
                            f"checkpoint (step-{newest_step}.pt)")  # fmt: skip
    if best_before is not None and (folder / "best.pt").exists():
        after = load(folder / "best.pt")
        b0, b1 = best_before.get("best") or {}, after.get("best") or {}
        if b0 and b1 and _worse(b1, b0):
            problems.append(f"best.pt replaced by a worse one: {b0} -> {b1}")
    finish_reference(ref_proc)
    if proc.code == 0:
        problems += compare_runs(run, ref)
    return verdict(problems, notes)


def _worse(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Is the best metric ``new`` worse than ``old`` (loss: higher; else: lower)?"""
    lower_is_better = "loss" in str(old.get("metric", ""))
    a, b = float(new.get("value", 0)), float(old.get("value", 0))
    return a > b if lower_is_better else a < b


# --------------------------------------------------------------------------- 10. DDP


def ddp_worker_dies(ctx: Ctx, rank: int, step: int) -> Outcome:
    """--nproc 2, a worker exits at ``step`` with no restarts: the summary must not stay
    'running'."""
    run = ctx.dir / "run"
    began = time.time()
    proc = ctx.run("train", "--nproc", "2", *BASE, "train.epochs=3", f"run.dir={run}",
                   crash_at.override(step, rank), name="ddp", timeout=300)  # fmt: skip
    took = time.time() - began
    problems = []
    st = status(run)
    if proc.code == 0:
        problems.append("exit 0 although a worker died")
    if st in ("running", None):
        problems.append(f"summary status {st!r} after the group ended")
    left = all_temporaries(run)
    if left:
        problems.append(f"temporary files left: {left}")
    return verdict(problems, [observed(proc, run), f"{took:.0f}s"])
