"""The chaos cases: each a function ``(ctx, **params) -> Outcome`` on tiny CPU runs.

The expected behaviour is the engine's contract (docs/engine/run-directory.md,
docs/engine/stop-crash-resume.md, docs/distributed/index.md); a case fails with what it saw instead:
the exit code, stderr's last line, the summary's status.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.crash_cases import (
    ddp_worker_dies,
    max_steps_kill,
    sigkill_resume,
    signal_resume,
    torn_last,
    two_processes,
)
from tests.chaos.harness import (
    CaseError,
    Ctx,
    Outcome,
)
from tests.chaos.input_cases import (
    BAD_CONFIGS,
    CRAFTED,
    bad_config,
    crafted_checkpoint,
    disk_trouble,
    export_over_checkpoint,
    resume_into_other_run,
)

# --------------------------------------------------------------------------- the registry


GROUPS = {
    1: "SIGKILL, resume auto: identical",
    2: "SIGTERM/SIGINT: interrupted, resume",
    3: "max_steps=12 kill at step-12",
    4: "--resume PATH into another run",
    5: "two processes, one run dir",
    6: "torn last.pt, good best/step-N",
    7: "crafted checkpoints",
    8: "configs refused up front",
    9: "full / read-only disk",
    10: "DDP worker dies, no restarts",
    11: "export over the checkpoint",
}


@dataclass(frozen=True)
class Case:
    """One chaos case: ``fn(ctx, **params)``; ``short`` ones also run under pytest."""

    id: str
    group: int
    fn: Callable[..., Outcome]
    params: dict[str, Any] = field(default_factory=dict)
    short: bool = False

    def run(self, folder: Path, seed: int = 0, verbose: bool = False) -> Outcome:
        """Run in ``folder`` (its own); every process it started is ended afterwards."""
        import random

        folder.mkdir(parents=True, exist_ok=True)
        ctx = Ctx(folder, random.Random(f"{seed}:{self.id}"), verbose=verbose)
        try:
            return self.fn(ctx, **self.params)
        except CaseError as exc:
            return Outcome(False, f"harness: {exc}")
        except Exception as exc:
            return Outcome(False, f"harness error {type(exc).__name__}: {exc}")
        finally:
            ctx.cleanup()


def _cases() -> list[Case]:
    cases = [
        Case("1.sigkill.mix", 1, sigkill_resume, {"plans": ["tmp", "random", "last"]}, True),
        Case("1.sigkill.random", 1, sigkill_resume,
             {"plans": ["startup", "random", "random", "random", "random"]}),
        Case("1.sigkill.mid-write", 1, sigkill_resume, {"plans": ["tmp", "tmp", "tmp", "tmp"]}),
        Case("1.sigkill.last-step", 1, sigkill_resume, {"plans": ["last"]}),
        Case("1.sigkill.keep-last-1", 1, sigkill_resume,
             {"plans": ["tmp", "random", "tmp", "last"],
              "overrides": ["train.epochs=6", "train.log_every=3", "checkpoint.every_steps=3",
                            "checkpoint.keep_last=1"]}),
        Case("2.sigterm.random", 2, signal_resume, {"sig": signal.SIGTERM, "plan": "random"}),
        Case("2.sigint.random", 2, signal_resume, {"sig": signal.SIGINT, "plan": "random"}),
        Case("2.sigterm.mid-write", 2, signal_resume, {"sig": signal.SIGTERM, "plan": "tmp"}),
        Case("2.sigint.mid-write", 2, signal_resume, {"sig": signal.SIGINT, "plan": "tmp"}),
        Case("2.sigterm.last-step", 2, signal_resume, {"sig": signal.SIGTERM, "plan": "last"}),
        Case("2.sigterm.finishing", 2, signal_resume,
             {"sig": signal.SIGTERM, "plan": "finishing"}),
        Case("3.max-steps.kill-at-step-12", 3, max_steps_kill, {"when": "step-12"}, True),
        Case("3.max-steps.kill-after-last", 3, max_steps_kill, {"when": "last.pt"}),
        Case("4.resume-path.step-5-into-B", 4, resume_into_other_run,
             {"checkpoint": "step-5.pt"}),
        Case("4.resume-path.last-into-B", 4, resume_into_other_run, {"checkpoint": "last.pt"}),
        Case("5.two-procs.resume-auto", 5, two_processes, {"second": "resume"}, True),
        Case("5.two-procs.fresh-start", 5, two_processes, {"second": "fresh"}),
        Case("6.torn-last.step-N-newest", 6, torn_last, {"every": 10, "kill_when": "step-40"}),
        Case("6.torn-last.after-epoch-end", 6, torn_last,
             {"every": 20, "kill_when": "epoch-end"}),
    ]  # fmt: skip
    short_crafted = {"plain-model", "tensor-config"}
    cases += [
        Case(f"7.crafted.{k}", 7, crafted_checkpoint, {"kind": k}, k in short_crafted)
        for k in CRAFTED
    ]
    short_configs = {"optim.eps=-1", "optim.lr=.inf", "model.name=os:system"}
    cases += [
        Case(
            f"8.config.{c.replace(str(2**70), '2**70')}",
            8,
            bad_config,
            {"override": c},
            c in short_configs,
        )
        for c in BAD_CONFIGS
    ]
    cases += [
        Case("9.disk.full-at-start", 9, disk_trouble, {"kind": "full", "leave_kib": 0}),
        # room for the run's small files and the first best.pt, not for last.pt too
        Case("9.disk.full-at-first-save", 9, disk_trouble, {"kind": "full", "leave_kib": 60}),
        # the first epoch's best.pt and last.pt fit; a later save does not
        Case("9.disk.full-mid-run", 9, disk_trouble, {"kind": "full", "leave_kib": 80}),
        Case("9.disk.read-only", 9, disk_trouble, {"kind": "read-only"}),
        Case("9.disk.read-only-resume", 9, disk_trouble, {"kind": "read-only-resume"}),
    ]
    cases += [
        Case("10.ddp.rank1-dies", 10, ddp_worker_dies, {"rank": 1, "step": 5}),
        Case("10.ddp.rank0-dies", 10, ddp_worker_dies, {"rank": 0, "step": 5}),
        Case(
            "11.export.onto-last.pt",
            11,
            export_over_checkpoint,
            {"source": "last.pt", "target": "last.pt"},
            True,
        ),
        Case(
            "11.export.run-onto-best.pt",
            11,
            export_over_checkpoint,
            {"source": "RUN", "target": "best.pt"},
        ),
    ]
    return cases


CASES = _cases()
SHORT = [c for c in CASES if c.short]


def select(pattern: str | None, full: bool) -> list[Case]:
    chosen = CASES if full or pattern else SHORT
    if pattern:
        chosen = [c for c in chosen if pattern in c.id]
    return chosen


__all__ = ["CASES", "GROUPS", "SHORT", "Case", "select"]
