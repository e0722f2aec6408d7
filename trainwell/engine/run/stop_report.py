"""The end of a run in words: why it stopped, and whose weights ``best.pt`` and
``FitResult.model`` hold (the console's last lines, and ``summary.json``'s ``stop`` and
``best_checkpoint``).

``FitResult.model`` (and the final test) holds the best checkpoint's weights when there
is one, the last weights otherwise; ``last.pt`` always holds the final state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainwell.engine.loop.trainer import Trainer


def describe_stop(trainer: Trainer, reason: str) -> dict[str, Any]:
    """``summary.json``'s ``stop``: the kind of stop, where, and for early stopping the
    monitored value; ``reason`` is what ``Trainer.train`` returned.

    Kinds: ``epochs`` (all done), ``max_steps``, ``early_stopping``, ``callback``.
    """
    loop, cfg = trainer.loop, trainer.cfg
    stop: dict[str, Any] = {"kind": _kind(reason), "step": loop.step,
                            "epoch": loop.epoch + 1, "epochs": cfg.train.epochs}  # fmt: skip
    if stop["kind"] == "early_stopping":
        stop.update(monitor=trainer.monitor, value=loop.metrics.get(trainer.monitor),
                    best=trainer.stopper.best, patience=trainer.stopper.patience)  # fmt: skip
    if stop["kind"] == "callback":
        stop["callback"] = trainer.callbacks.stop_requested_by
    if stop["kind"] == "max_steps":
        stop["max_steps"] = cfg.train.max_steps
    return stop


def _kind(reason: str) -> str:
    if reason.startswith("stopped by callback"):
        return "callback"
    if reason.startswith("early stop"):
        return "early_stopping"
    return reason if reason in ("max_steps", "epochs") else "other"


def stop_line(stop: dict[str, Any]) -> str:
    """Why the run stopped, in one line.

    Example:
        >>> stop_line({"kind": "max_steps", "step": 50, "epoch": 2, "epochs": 20,
        ...            "max_steps": 50})
        'stopped: train.max_steps=50 reached, at epoch 2 of 20'
    """
    kind, step, epoch, epochs = stop["kind"], stop["step"], stop["epoch"], stop["epochs"]
    if kind == "early_stopping":
        value = _number(stop.get("value"))
        return (f"stopped: early stopping at epoch {epoch} of {epochs} (step {step}): "
                f"{stop['monitor']} {value}, no better than its best {_number(stop['best'])} "
                f"for {stop['patience']} evaluations")  # fmt: skip
    if kind == "callback":
        return (f"stopped: callback {stop['callback']} asked to stop, at epoch {epoch} of "
                f"{epochs} (step {step})")  # fmt: skip
    if kind == "max_steps":
        return f"stopped: train.max_steps={stop['max_steps']} reached, at epoch {epoch} of {epochs}"
    return f"stopped: all {epochs} epochs done ({step} steps)"


def weights_line(trainer: Trainer, weights: str) -> str:
    """Whose weights ``best.pt`` and ``FitResult.model`` hold; ``weights`` is what
    ``Checkpointer.load_best_weights`` returned."""
    best = trainer.loop.best
    if weights.startswith("best") and best:
        name = weights.split()[0]  # best.pt, or best/ for a sharded (fsdp) checkpoint
        name = name if name.endswith(".pt") else f"{name}/"
        return (f"weights: {name} holds the best {best['metric']} "
                f"({_number(best['value'])}, step {best['step']}, epoch {best['epoch'] + 1}); "
                "FitResult.model and the test metrics use it; last.pt holds the final "
                f"state (step {trainer.loop.step})")  # fmt: skip
    return (f"weights: no best.pt ({trainer.monitor} never improved at an evaluation); "
            f"FitResult.model holds the last weights (step {trainer.loop.step}), as last.pt "
            "does")  # fmt: skip


def best_entry(trainer: Trainer) -> dict[str, Any] | None:
    """``summary.json``'s ``best_checkpoint``: best.pt's monitor, value, step and epoch."""
    best = trainer.loop.best
    if not best:
        return None
    return {"monitor": best["metric"], "value": best["value"], "step": best["step"],
            "epoch": best["epoch"] + 1,
            "file": "best" if trainer.checkpointer.sharded else "best.pt"}  # fmt: skip


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def annotate(trainer: Trainer, summary: dict[str, Any]) -> list[str]:
    """Add ``stop`` and ``best_checkpoint`` to the summary; the console's closing lines."""
    summary["stop"] = stop = describe_stop(trainer, str(summary.get("stop_reason", "")))
    summary["best_checkpoint"] = best_entry(trainer)
    return [stop_line(stop), weights_line(trainer, str(summary.get("weights", "")))]
