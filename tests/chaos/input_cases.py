"""Chaos cases that feed bad input: a foreign checkpoint, crafted files, configs that
must be refused, a full or read-only disk, export over its source."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from tests.chaos.harness import (
    BASE,
    CaseError,
    Ctx,
    Outcome,
    all_temporaries,
    fill,
    last_line,
    load,
    mount_tmpfs,
    observed,
    one_line_error,
    remount,
    same_tensors,
    skipped,
    status,
    tree_changes,
    tree_hashes,
    verdict,
)
from tests.chaos.steps import (
    make_run_inprocess,
    train_args,
)

# --------------------------------------------------------------------------- 4. --resume PATH


def resume_into_other_run(ctx: Ctx, checkpoint: str) -> Outcome:
    """``--resume A/checkpoints/X`` with run.dir=B (completed): B untouched."""
    overrides = ["train.epochs=1", "checkpoint.every_steps=5", "checkpoint.keep_last=100"]
    a, b = ctx.dir / "A", ctx.dir / "B"
    pa = ctx.launch(*train_args(a, overrides, resume=None), name="run-A")
    pb = ctx.launch(*train_args(b, overrides, resume=None), name="run-B")
    for p, r in ((pa, a), (pb, b)):
        if p.wait(180) != 0:
            raise CaseError(f"could not make run {r.name}: {observed(p, r)}")
    before_a, before_b = tree_hashes(a), tree_hashes(b)
    before_dirs = set(os.listdir(ctx.dir))
    proc = ctx.run(*train_args(b, overrides, resume=str(a / "checkpoints" / checkpoint)),
                   name="resume-into-B")  # fmt: skip
    problems = []
    changes_b = tree_changes(before_b, tree_hashes(b))
    if changes_b:
        problems.append(f"run B was overwritten: {'; '.join(changes_b)}")
    changes_a = tree_changes(before_a, tree_hashes(a))
    if changes_a:
        problems.append(f"run A was written to (not a fresh directory): {'; '.join(changes_a)}")
    notes = [observed(proc, b)]
    if proc.code == 2:
        bad = one_line_error(proc)
        if bad:
            problems.append(bad)
    elif proc.code == 0:
        fresh = sorted(set(os.listdir(ctx.dir)) - before_dirs - {"_logs"})
        runs = list((ctx.dir / "runs").glob("*")) if (ctx.dir / "runs").exists() else []
        notes.append(f"exit 0; new folders: {fresh or [str(r) for r in runs]}")
        if not (changes_a or changes_b or fresh or runs):
            problems.append("exit 0 but no fresh run directory was made")
    else:
        problems.append(f"neither refused (exit 2) nor a fresh run: {observed(proc, b)}")
    return verdict(problems, notes)


# --------------------------------------------------------------------------- 7. crafted files


def _craft(kind: str, full: dict[str, Any]) -> dict[str, Any]:
    import torch

    state = dict(full)
    if kind == "plain-model":
        return {"model": full["model"]}
    if kind in ("no-config", "no-scheduler", "no-early-stop"):
        state.pop(kind[3:].replace("-", "_"))
        return state
    if kind == "string-step":
        state["step"] = "12"
        state["loop"] = {**state["loop"], "step": "12"}
        return state
    if kind == "tensor-config":
        state["config"] = torch.tensor([1.0, 2.0])
        return state
    if kind == "non-tensor-weights":
        state["model"] = {k: v.tolist() for k, v in full["model"].items()}
        return state
    raise ValueError(kind)


CRAFTED = ["plain-model", "no-config", "no-scheduler", "no-early-stop", "string-step",
           "tensor-config", "non-tensor-weights"]  # fmt: skip


def crafted_checkpoint(ctx: Ctx, kind: str) -> Outcome:
    """A crafted checkpoint given to ``--resume PATH`` and to ``export``: exit 2 and one
    line, never a traceback, never a run left 'running' (export may also succeed)."""
    import torch

    base = ctx.dir / "base"
    make_run_inprocess(base, ["train.epochs=1"])
    path = ctx.dir / f"{kind}.pt"
    torch.save(_craft(kind, load(base / "checkpoints" / "last.pt")), path)
    run = ctx.dir / "run"
    out = ctx.dir / f"{kind}.safetensors"
    resume = ctx.launch(*train_args(run, ["train.epochs=2"], resume=str(path)), name="resume")
    export = ctx.launch("export", str(path), "--format", "safetensors", "--output", str(out),
                        name="export")  # fmt: skip
    resume.wait(180)
    export.wait(180)
    problems = []
    bad = one_line_error(resume)
    if bad:
        problems.append(f"resume: {bad}")
    if status(run) == "running":
        problems.append("resume: the run was left at status 'running'")
    if export.code == 0 and "Traceback" not in export.stderr:
        try:
            from safetensors.torch import load_file

            diff = same_tensors(load_file(str(out)), load(path)["model"])
        except Exception as exc:
            diff = f"{type(exc).__name__}: {exc}"
        if diff:
            problems.append(f"export: exit 0 but the file does not hold the weights: {diff}")
    else:
        bad = one_line_error(export)
        if bad:
            problems.append(f"export: {bad}")
    notes = [f"resume {observed(resume)}", f"export {observed(export)}"]
    return verdict(problems, notes)


# --------------------------------------------------------------------------- 8. bad configs


def bad_config(ctx: Ctx, override: str) -> Outcome:
    """A config that must be refused up front: exit 2, one line, nothing written or run."""
    marker = ctx.dir / "PWNED"
    base, extra = BASE, []
    if override.startswith("model.name="):  # the callable gets only the payload
        base = [o for o in BASE if not o.startswith("model.kwargs.")]
        extra = [f"model.kwargs.command=touch {marker}"]
    if override.startswith("data.name="):
        base = [o for o in BASE if not o.startswith("data.kwargs.")]
    run = ctx.dir / "run"
    proc = ctx.run(*train_args(run, [override, *extra], resume=None, base=base), name="refuse")
    problems = []
    bad = one_line_error(proc)
    if bad:
        problems.append(bad)
    if marker.exists():
        problems.append("the config ran code: the marker file was created")
    if run.exists():
        problems.append(f"not refused up front: run.dir was created (status {status(run)!r})")
    return verdict(problems, [observed(proc)])


BAD_CONFIGS = [
    "optim.eps=-1",
    "optim.lr=1e308",
    "optim.lr=.inf",
    f"run.seed={2**70}",
    "model.kwargs.hidden=[-4]",
    "model.name=os:system",
    "data.name=builtins:eval",
]


# --------------------------------------------------------------------------- 9. full disk


def disk_trouble(ctx: Ctx, kind: str, leave_kib: int = 0) -> Outcome:
    """run.dir on a small tmpfs, full or read-only: one clear error line, status failed
    where writable, no temporary file left."""
    disk, why = mount_tmpfs(ctx, "disk")
    if disk is None:
        return skipped(why)
    run = disk / "run"
    overrides = ["train.epochs=3"]
    resume: str | None = None
    if kind == "full":
        fill(disk, leave_kib * 1024)
    elif kind == "read-only":
        why = remount(disk, "ro")
        if why:
            return skipped(why)
    elif kind == "read-only-resume":
        make_run_inprocess(run, ["train.epochs=1"])
        overrides, resume = ["train.epochs=2"], "auto"
        why = remount(disk, "ro")
        if why:
            return skipped(why)
    free = _free_kib(disk)
    before = tree_hashes(run)
    proc = ctx.run(*train_args(run, overrides, resume=resume), name=kind)
    problems = []
    bad = one_line_error(proc)
    if bad:
        problems.append(bad)
    st = status(run)
    # "Where writable": had the run room to rewrite its summary once it had stopped? The
    # room its own finishing files (doctor.json, curves.png) took counts as room it had.
    spent = sum(_allocated(run / name) for name in ("doctor.json", "curves.png"))
    writable = kind == "full" and (
        _can_write(run, len(_read_bytes(run / "summary.json"))) or spent >= 4096
    )
    if writable and st is not None and st != "failed":
        problems.append(
            f"summary status {st!r}, not 'failed', though the disk had room for it "
            f"({_free_kib(disk)} KiB free after; {spent // 1024} KiB went to "
            "doctor.json/curves.png)"
        )
    if kind != "full" and st == "running":
        problems.append("summary left at 'running'")
    empty = sorted(p.name for p in run.rglob("*") if p.is_file() and p.stat().st_size == 0)
    if kind == "read-only-resume" and tree_changes(before, tree_hashes(run)):
        problems.append("the read-only run changed")
    left = all_temporaries(run)
    if left:
        problems.append(f"temporary files left: {left}")
    notes = [f"{free} KiB free before, {_free_kib(disk)} KiB after", observed(proc, run)]
    if empty:
        notes.append(f"empty files left: {empty}")
    return verdict(problems, notes)


def _free_kib(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize // 1024


def _allocated(path: Path) -> int:
    try:
        return path.stat().st_blocks * 512
    except OSError:
        return 0


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _can_write(run: Path, size: int) -> bool:
    """Can a new file of ``size`` bytes be written in ``run`` now (then removed)?"""
    probe = run / ".chaos-probe"
    try:
        with open(probe, "wb") as f:
            f.write(b"x" * max(size, 1))
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


# --------------------------------------------------------------------------- 11. export


def export_over_checkpoint(ctx: Ctx, source: str, target: str) -> Outcome:
    """``export ... --output`` naming the checkpoint itself must not replace it."""
    run = ctx.dir / "run"
    make_run_inprocess(run, ["train.epochs=1"])
    folder = run / "checkpoints"
    src = run if source == "RUN" else folder / source
    before = tree_hashes(run)
    proc = ctx.run("export", str(src), "--format", "safetensors", "--output", str(folder / target),
                   name="export")  # fmt: skip
    problems = []
    changes = tree_changes(before, tree_hashes(run))
    if any(target in c for c in changes):
        problems.append(f"{target} was replaced ({'; '.join(changes)})")
    try:
        state = load(folder / target)
        if "optimizer" not in state:
            problems.append(f"{target} no longer holds the training state")
    except Exception as exc:
        problems.append(f"{target} no longer loads as a checkpoint ({type(exc).__name__})")
    if proc.code != 0:
        bad = one_line_error(proc)
        if bad:
            problems.append(bad)
    elif "Traceback" in proc.stderr:
        problems.append(f"traceback: {last_line(proc.stderr)!r}")
    return verdict(problems, [observed(proc)])
