"""The end of a run that did not complete: interrupted (it resumes exactly) or failed
(the error in its summary, the doctor's explanation beside it)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from trainwell.doctor.crash import explain as explain_crash
from trainwell.engine.build.doctor_data import name_the_data
from trainwell.engine.run.run_files import finish, resume_command
from trainwell.engine.state.signals import GracefulStop, Interrupted, stopped_by_peer
from trainwell.errors import Diverged, UserError

if TYPE_CHECKING:
    from rich.console import Console

    from trainwell.doctor.frame import Doctor
    from trainwell.engine.loop.trainer import Trainer


def end_failed(
    trainer: Trainer,
    summary: dict[str, Any],
    started: float,
    exc: BaseException,
    *,
    console: Console,
    stop: GracefulStop,
    doc: Doctor | None,
) -> None:
    """Leave the run directory telling the truth: interrupted (resumable) or failed.

    ``exc`` is what ended the run (``fit`` raises it again after); ``summary`` the run's
    summary so far, ``started`` its ``time.time()`` at the first step."""
    trainer.progress.close()
    exc = stopped_by_peer(exc, stop)  # a collective that broke while stopping: the stop
    run = trainer.run
    if isinstance(exc, KeyboardInterrupt):
        if isinstance(exc, Interrupted) and not exc.abort and not trainer.done:
            # Raised at a step boundary: this state resumes exactly. An abort (a second
            # signal) or a bare Ctrl-C may have come mid-step: keep the last checkpoint.
            # After training, last.pt already holds the final state (and the model now
            # holds the best weights, which must not go into it).
            trainer.checkpointer.save(run, trainer.loggers, ["last.pt"])
        with contextlib.suppress(UserError):  # the signal is the news, not a full disk
            finish(run, summary, "interrupted", trainer, started, doc)
        console.print(
            f"[yellow]interrupted[/] at step {trainer.loop.step}; resume with:\n  "
            f"{resume_command(trainer.cfg, run.path)}",
            highlight=False,
        )
        exc.reported = True  # type: ignore[attr-defined]  # the CLI adds no line of its own
        return
    name_the_data(exc, doc)  # NaN in the data: the message names it, not the lr
    summary["error"] = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, Diverged):
        summary["stop_reason"] = "diverged"
    if doc is not None:
        explain_crash(doc, exc)
    # The error that stopped the run is the one to report; one more from writing its end
    # (the same full disk) would only hide it.
    with contextlib.suppress(UserError):
        finish(run, summary, "failed", trainer, started, doc)
