"""What a checkpoint holds, how it is written from rank 0, and how a run resumes from it.

As with torchtitan's ``Stateful``, a checkpoint is a dict of the stateful objects'
``state_dict()``s (model, optimizer, scheduler, GradScaler, early stopping), the loop's
counters and running sums, every rank's RNG state and the config: tensors and plain
containers only, so it loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

import trainwell
from trainwell.config import Config, to_dict
from trainwell.engine.checkpointing import checkpoint as ckpt
from trainwell.engine.checkpointing import sharded
from trainwell.engine.checkpointing.added_groups import (
    frozen,
    layout,
    restore_frozen,
    restore_layout,
    sync_scheduler,
)
from trainwell.engine.checkpointing.lock_check import refuse_if_held
from trainwell.engine.checkpointing.resume import find as find_checkpoint
from trainwell.engine.checkpointing.resume import load_resumable, run_of, version_note
from trainwell.engine.distributed.fsdp import is_sharded
from trainwell.engine.distributed.placement import Placement, any_process, barrier, gather_objects
from trainwell.engine.run_dir.directory import RunDir, refuse_dangling
from trainwell.engine.state.callbacks import Callbacks
from trainwell.engine.state.early_stopping import EarlyStopping
from trainwell.engine.state.loop_state import LoopState, restore_rng, rng_state
from trainwell.engine.state.metrics import MetricSums
from trainwell.engine.step.precision import Precision
from trainwell.errors import UserError
from trainwell.loggers import Loggers


@dataclass
class Checkpointer:
    """The run's stateful objects, saved and restored together.

    Example (the full cycle is in ``tests/unit/engine/test_resume.py``)::

        ckpt = Checkpointer(cfg, place, model, optimizer, scheduler, precision, stopper, loop)
        ckpt.save(run, loggers, ["last.pt"])
        ckpt.load_state_dict(load_checkpoint(run.checkpoints / "last.pt"))
    """

    cfg: Config
    place: Placement
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    precision: Precision
    stopper: EarlyStopping
    loop: LoopState
    callbacks: Callbacks = field(default_factory=Callbacks)
    # More entries for every checkpoint (fit(model=obj)'s model_record).
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The config does not change during a run; converting it costs milliseconds.
        self.config_dict = to_dict(self.cfg)
        # dist.strategy=fsdp: sharded folders (DCP), on one process too, so that a run
        # can move between 1 and N processes.
        self.sharded = self.cfg.dist.strategy == "fsdp"

    def state_dict(self, loggers: Loggers) -> dict[str, Any]:
        state = self.loop_state_dict(loggers)
        state["model"] = self.model.state_dict()
        state["optimizer"] = self.optimizer.state_dict()
        return state

    def loop_state_dict(self, loggers: Loggers) -> dict[str, Any]:
        """Everything but the model's and the optimizer's state (a sharded checkpoint's
        ``state.pt``); ``loggers`` give theirs (a resumed run continues their logs)."""
        scaler = self.precision.scaler
        loop = self.loop
        return {
            "scheduler": self.scheduler.state_dict(),
            # Which parameters each optimizer group holds: groups added at run time
            # are re-added from it on resume.
            "optim_layout": layout(self.model, self.optimizer),
            "frozen": frozen(self.model),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "step": loop.step,
            "epoch": loop.epoch,
            # The data order is a function of (seed, epoch), so the seed, the epoch and the
            # optimizer steps already taken in it are all it takes to replay the rest.
            "data": {
                "seed": self.cfg.run.seed,
                "epoch": loop.epoch,
                "steps_into_epoch": loop.steps_into_epoch,
            },
            "loop": loop.state_dict(),
            "early_stop": self.stopper.state_dict(),
            "callbacks": self.callbacks.state_dict(),
            "loggers": loggers.state_dict(),
            "best": dict(loop.best),
            "metrics": dict(loop.metrics),
            "rng": rng_state(),
            "config": self.config_dict,
            "versions": {"trainwell": trainwell.__version__, "torch": str(torch.__version__)},
            "format": ckpt.FORMAT,
            **self.extra,
        }

    def load_state_dict(self, state: dict[str, Any], path: Path | None = None) -> None:
        """Restore everything but the RNGs (:meth:`restore_rng`, called last of all);
        ``path`` is where a sharded checkpoint's shards are."""
        restore_layout(self.model, self.optimizer, state.get("optim_layout"))
        restore_frozen(self.model, state.get("frozen"))
        if state.get("sharded"):
            assert path is not None, "a sharded checkpoint loads from its folder"
            sharded.load_into(path, self.model, self.optimizer)
        else:
            self._load_weights(state)
        self._load_scheduler(state["scheduler"])
        if self.precision.scaler is not None and state.get("scaler"):
            self.precision.scaler.load_state_dict(state["scaler"])
        self.stopper.load_state_dict(state["early_stop"])
        self.callbacks.load_state_dict(state.get("callbacks") or {})
        loop = state.get("loop") or {}
        per_rank = state.get("loop_per_rank") or []
        if len(per_rank) == self.place.world_size:
            # Each rank's own running sums: they are reduced over ranks only when read.
            loop = per_rank[self.place.rank]
        if "window" in loop:
            self.loop.load_state_dict(loop)
            if len(per_rank) != self.place.world_size and (per_rank or self.place.distributed):
                self._regroup_sums(per_rank or [loop])
        else:  # a checkpoint from before the running sums were saved per metric
            self.loop.step, self.loop.epoch = int(state["step"]), int(state["epoch"])
            self.loop.epoch_start_step = self.loop.step - int(state["data"]["steps_into_epoch"])
            self.loop.best = dict(state.get("best") or {})
            self.loop.metrics = {k: float(v) for k, v in (state.get("metrics") or {}).items()}

    def _regroup_sums(self, per_rank: list[dict[str, Any]]) -> None:
        """Resumed on another number of processes: rank 0 carries every old rank's
        running sums, the others none (they are summed over ranks when read)."""
        loop = self.loop
        mine = (loop.window, loop.epoch_sums, loop.optim_window)
        for sums in mine:
            sums.reset()
        if not self.place.is_main:
            return
        for saved in per_rank:
            for sums, key in zip(mine, ("window", "epoch_sums", "optim_window")):
                other = MetricSums(sums.device)
                other.load_state_dict(saved.get(key) or {"sums": {}, "counts": {}})
                sums.merge(other)

    def _load_weights(self, state: dict[str, Any]) -> None:
        if is_sharded(self.model):
            raise UserError(
                "the checkpoint is one file (dist.strategy=ddp); an FSDP run on several "
                "processes resumes from sharded folders: resume it with dist.strategy=ddp"
            )
        try:
            self.model.load_state_dict(state["model"])
        except RuntimeError as exc:
            detail = " ".join(str(exc).split())[:300]
            raise UserError(f"the checkpoint does not fit this model: {detail}") from None
        try:
            _load_optimizer(self.model, self.optimizer, state["optimizer"])
        except (ValueError, KeyError) as exc:
            raise UserError(f"the checkpoint's optimizer state does not fit: {exc}") from None

    def _load_scheduler(self, saved: dict[str, Any]) -> None:
        lambdas = getattr(self.scheduler, "lr_lambdas", None)
        if not isinstance(self.scheduler, torch.optim.lr_scheduler.LambdaLR) or lambdas is None:
            self.scheduler.load_state_dict(saved)
            sync_scheduler(self.scheduler, self.optimizer)  # groups added at run time
            return
        base_lrs = list(self.scheduler.base_lrs)
        self.scheduler.load_state_dict(saved)
        # Groups added at run time keep their own peak lr.
        base_lrs += list(self.scheduler.base_lrs)[len(base_lrs) :]
        self.scheduler.base_lrs = base_lrs
        sync_scheduler(self.scheduler, self.optimizer)
        lambdas = self.scheduler.lr_lambdas
        base_lrs = list(self.scheduler.base_lrs)
        # The configured lr and schedule win: a deliberate change of optim.lr or of the
        # run's length takes effect from the next step. Unchanged, this recomputes the
        # very same lr that LambdaLR would (base_lr * factor(step)).
        self.scheduler.base_lrs = base_lrs
        for group, base, fn in zip(self.optimizer.param_groups, base_lrs, lambdas):
            group["initial_lr"] = base
            group["lr"] = base * fn(self.scheduler.last_epoch)

    def restore_rng(self, state: dict[str, Any]) -> None:
        """This rank's RNGs as saved; last of all, so that set-up shifts no random stream."""
        per_rank = state.get("rng_per_rank") or []
        ok = len(per_rank) == self.place.world_size
        restore_rng(per_rank[self.place.rank] if ok else state["rng"])

    def save(self, run: RunDir, loggers: Loggers, names: list[str]) -> None:
        """Write checkpoints from rank 0 while the other ranks wait for the outcome.

        Every rank's RNG state and running sums go in (exact resume on N processes). A
        write that fails (a full disk, no permission) stops every rank with a clear
        error, never a hang; the previous file of that name is intact.
        """
        place = self.place
        rngs = loops = None
        if place.distributed:
            rngs = gather_objects(rng_state(), place)
            loops = gather_objects(self.loop.state_dict(), place)
        state = None
        if place.is_main:
            state = self.loop_state_dict(loggers) if self.sharded else self.state_dict(loggers)
            # How many metric rows belong to this state: a resume drops the rest. They are
            # on disk before the checkpoint that counts them.
            run.flush()
            state["log_rows"] = len(run.rows)
            # What the loggers were given up to here is stored before the checkpoint is.
            loggers.flush()
            if rngs is not None:
                state["rng_per_rank"] = rngs
                state["loop_per_rank"] = loops
        if self.sharded:
            # The ranks agreed on the outcome folder by folder: every rank has the error.
            error = self._save_sharded(run, names, state)
            if error is not None:
                raise UserError(error)
            return
        error = _save_files(run, names, state) if state is not None else None
        if any_process(error is not None, place):
            raise UserError(error or "rank 0 could not write a checkpoint (see its error)")

    def _save_sharded(self, run: RunDir, names: list[str], state: Any) -> str | None:
        """Every rank writes its shards of each folder (``last.pt`` names ``last/``); the
        ranks agree after each one, so that none goes on to the next alone."""
        for name in names:
            error = sharded.save(run.checkpoints / name.removesuffix(".pt"), self.model,
                                 self.optimizer, state, self.place.is_main,
                                 barrier=lambda: barrier(self.place))  # fmt: skip
            if error is not None:
                error = f"could not write checkpoint {run.checkpoints / name}: {error}"
            if any_process(error is not None, self.place):
                return error or f"another process could not write {run.checkpoints / name}"
        return None

    def load_best_weights(self, run: RunDir) -> str:
        """Put the best checkpoint's weights in the model; says whose weights it holds."""
        best = run.checkpoints / ("best" if self.sharded else "best.pt")
        if not best.exists():
            return f"last (step {self.loop.step})"
        if self.sharded:
            state = sharded.load_state(best)
            sharded.load_into(best, self.model, None)
        else:
            state = ckpt.load_checkpoint(best)
            self.model.load_state_dict(state["model"])
        return f"{best.name} (step {int(state['step'])})"


def _load_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer, saved: dict) -> None:
    groups = saved.get("param_groups") or [{}]
    if groups[0].get("params") and isinstance(groups[0]["params"][0], str):
        # Keyed by parameter name: a sharded checkpoint consolidated (`export --format pt`).
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, saved)
    else:
        optimizer.load_state_dict(saved)


def _save_files(run: RunDir, names: list[str], state: dict[str, Any]) -> str | None:
    """Rank 0 writes each file; returns the error that stopped it."""
    try:
        ckpt.save_copies(state, [run.checkpoints / name for name in names])
    except OSError as exc:
        code = errno.errorcode.get(exc.errno or 0, "")
        return f"{exc.strerror or exc}" + (f" ({code})" if code else "")
    return None


def resume_point(
    cfg: Config, resume: str | Path | None, say: Callable[[str], None]
) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint to continue from and its state; ``None`` to start afresh.

    ``resume`` is ``"auto"`` (the newest usable checkpoint of ``run.dir``, none at all:
    afresh), a run directory (its newest usable checkpoint), or a checkpoint. A run that
    another process holds is refused before anything about it is read or said.
    """
    if resume is None:
        return None
    if str(resume) == "auto":
        if not cfg.run.dir:
            raise UserError("--resume auto needs run.dir: the run directory to continue")
        refuse_dangling(Path(cfg.run.dir))
        refuse_if_held(Path(cfg.run.dir))
        found = find_checkpoint(Path(cfg.run.dir), say=say)
        if found is None:
            say(f"no checkpoint in {cfg.run.dir}; starting from scratch")
            return None
    else:
        found = _named(cfg, Path(resume), say)
    now = {"trainwell": trainwell.__version__, "torch": str(torch.__version__)}
    note = version_note(found[0], found[1], now)
    if note:
        say(note)
    return found


def _named(cfg: Config, path: Path, say: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    """``--resume PATH``: a run directory (its newest usable checkpoint) or a checkpoint."""
    run = run_of(path)
    # A checkpoint continues its own run, unless run.dir names another folder.
    own = run or (path.parent.parent if path.parent.name == "checkpoints" else None)
    target = Path(cfg.run.dir) if cfg.run.dir else own
    if target is not None:
        refuse_if_held(target)
    if run is None:
        return path, load_resumable(path)
    found = find_checkpoint(run, say=say)
    if found is None:
        raise UserError(f"--resume {path}: the run directory holds no checkpoint to resume")
    return found
