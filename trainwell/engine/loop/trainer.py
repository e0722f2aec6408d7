"""The training loop, read top to bottom: ``train()`` over ``train_step()`` and ``end_of_epoch()``.

::

    for epoch:
        for optimizer step:
            train_step: zero grads -> [micro-batch: step function under autocast -> loss /
                        accum -> backward] -> unscale -> clip -> optimizer step -> scheduler
            after_step: log every N steps -> callbacks -> step-N checkpoint -> honour a signal
        end_of_epoch: evaluate -> best checkpoint -> last checkpoint -> early stopping

Metrics stay on the device between log points: ``.item()`` forces a CPU-GPU sync, so it
runs every ``train.log_every`` steps, not every step.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainwell.engine.build.optim import steps_per_eval
from trainwell.engine.build.param_groups import group_lrs
from trainwell.engine.build.sched_step import (
    flat_counter,
    scheduler_step,
    steps_until_countable,
)
from trainwell.engine.checkpointing import checkpoint as ckpt
from trainwell.engine.distributed.ddp_unfrozen import check_all_params_got_grads
from trainwell.engine.distributed.placement import any_process, broadcast_object
from trainwell.engine.loop.amp import amp_metrics
from trainwell.engine.loop.assembly import Assembly, StepsProfiler
from trainwell.engine.loop.divergence import stop_if_diverged
from trainwell.engine.loop.memory import MemoryLog
from trainwell.engine.loop.memory_watch import MemoryWatch, watch_step
from trainwell.engine.loop.monitor import check_reported
from trainwell.engine.loop.progress import Progress
from trainwell.engine.run_dir.directory import RunDir
from trainwell.engine.state.callbacks import read_only
from trainwell.engine.step.lean import fusable, loss_steps, plain_steps
from trainwell.loggers import Loggers


@dataclass(kw_only=True)
class Trainer(Assembly):
    """The loop and its collaborators, called at named points in order.

    ``fit`` builds it whole (:mod:`trainwell.engine.fit`) with :meth:`start`, from the
    :class:`~trainwell.engine.loop.assembly.Assembly` and what the open run directory
    brings; ``train()`` runs the epochs and returns why it stopped. The loop's state is
    ``loop`` (counters and running sums), saved with everything else by ``checkpointer``.
    (A dataclass extending the Assembly's fields, not a second copy of them: the loop
    reads ``self.model``, ``self.loop``... as it always did.)
    """

    run: RunDir
    progress: Progress
    loggers: Loggers
    # train.profile: torch.profiler over a few steps (rank 0), then None again.
    profiler: StepsProfiler | None = None
    train_time: float = 0.0
    # Seconds of the first compiled step (train.compile), reported apart from step times.
    compile_s: float | None = None
    # True once train() returned: the final state is in last.pt.
    done: bool = False
    # The monitor was reported once (or found missing: the run stopped).
    _monitor_seen: bool = field(default=False, repr=False)
    _epoch_started: float = field(default=0.0, repr=False)
    _last_window_loss: float | None = field(default=None, repr=False)

    @classmethod
    def start(
        cls,
        plan: Assembly,
        *,
        run: RunDir,
        progress: Progress,
        loggers: Loggers,
        profiler: StepsProfiler | None = None,
    ) -> Trainer:
        """The Trainer of ``plan``, writing into ``run``."""
        return cls(**plan.parts(), run=run, progress=progress, loggers=loggers,
                   profiler=profiler)  # fmt: skip

    def __post_init__(self) -> None:
        # Decided once, not per step.
        self._per_eval = steps_per_eval(self.scheduler)
        # On several processes the ranks must agree on the step to stop at, which takes a
        # collective (a device sync on CUDA): only at log points, where the loop syncs anyway.
        self._stop_every = self.cfg.train.log_every if self.place.distributed else 1
        self._on_step = self.callbacks.has("on_step_end")
        # Per step: the scheduler's call (a fast path for a flat schedule) and whether
        # the one-off DDP gradient check is still to come; decided here, not per step.
        self._step_scheduler = None if self._per_eval else scheduler_step(self.scheduler)
        dist = self.cfg.dist  # (with find_unused_parameters, DDP itself allows them)
        self._ddp_check_due = (self.place.distributed and dist.strategy == "ddp"
                               and not dist.find_unused_parameters)  # fmt: skip
        self._stop_collective = self.place.distributed  # else the flag alone, per step
        self.memory = MemoryLog(self.place.device)
        self.callbacks.writer = self._write_logged  # ctx.log
        doctor = self.cfg.doctor
        self.memwatch = MemoryWatch(doctor.memory_growth_mb, doctor.memory_growth_action)
        self._memory_action: str | None = None
        self._last_logged: dict[str, float] = {}  # ctx.metrics at on_step_end adds them

    def train(self, resumed: bool) -> str:
        """Epochs of optimizer steps until the schedule ends, max_steps or early stopping."""
        epoch, skip = self._start(resumed)
        self.stop_if_requested()  # a signal during set-up: stop before the first step
        self.notify("on_fit_start")
        while epoch < self.cfg.train.epochs and not self._should_stop():
            if self.loop.step >= self.total_steps and not skip:
                break
            self.loop.start_epoch(epoch, skip)
            self.model.train()
            # Labels the data set could not show up front are checked in the first epoch.
            self.stepper.inspect_epoch(self.check_labels, epoch)
            # The epoch's iterator is made before its steps are timed.
            left = self.total_steps - self.loop.step
            steps = itertools.islice(self.data.epoch(epoch, skip), left)
            self._epoch_started = started = time.perf_counter()
            self.clock.restart()  # the evaluation before this epoch is no step's time
            if self._lean():  # the same steps, after_step only at steps with work for it
                self.lean_steps(steps)
            else:
                for micro_batches in steps:
                    self.train_step(micro_batches)
                    self.after_step()
                    if self.callbacks.stop_requested_by or self._memory_action == "stop":
                        break  # the epoch still ends: evaluation, best, last
            self.train_time += time.perf_counter() - started
            self.end_of_epoch(epoch)
            self.stop_if_requested()
            epoch, skip = epoch + 1, 0
        self.done = True
        if self._memory_action == "stop":
            return "memory growth: stopped before an out-of-memory (doctor.memory_growth_mb)"
        if self.callbacks.stop_requested_by:
            return f"stopped by callback {self.callbacks.stop_requested_by}"
        if self.stopper.should_stop:
            return f"early stop: no better {self.monitor} in {self.stopper.patience} evals"
        max_steps = self.cfg.train.max_steps
        return "max_steps" if max_steps and self.loop.step >= max_steps else "epochs"

    def train_step(self, micro_batches: Sequence[Any]) -> None:
        """One optimizer step (the engine's :class:`~trainwell.engine.step.stepper.Stepper`), the
        scheduler's step, and the counters."""
        clock = self.clock
        clock.mark("data")  # since the last step ended: waiting for this batch
        loop = self.loop
        if self.stepper.eager is not None:  # the first compiled step: timed apart
            began = time.perf_counter()
            self.stepper(micro_batches, loop.window, loop.optim_window)
            self._report_compile(time.perf_counter() - began)
        else:
            self.stepper(micro_batches, loop.window, loop.optim_window)
        if self._ddp_check_due:
            check_all_params_got_grads(self.model)
            self._ddp_check_due = False
        if self._step_scheduler is not None:
            self._step_scheduler()
        loop.step += 1
        # Since compute: the optimizer's step and the scheduler's; the step is counted.
        clock.mark("optim", ends_step=True)

    def _lean(self) -> bool:
        """This epoch's steps are lean: one fp32 micro-batch on the CPU (``Stepper.plain``),
        no compiled first step due, one process, no ``on_step_end`` callback or profiler."""
        return (self.stepper.plain and self.stepper.eager is None and self.data.accum == 1
                and not self._on_step and self.profiler is None and not self.place.distributed)

    def lean_steps(self, steps: Iterator[Sequence[Any]]) -> None:
        """:meth:`train_step` then :meth:`after_step` for each of ``steps``, where
        :meth:`_lean`: the same calls in the same order, but in runs of steps in one frame,
        after_step only at the steps where it has work (a log point, a step-N checkpoint,
        the run's last step, a signal), known ahead, and a flat schedule's steps counted
        then (:func:`~trainwell.engine.build.sched_step.flat_counter`). On a tiny model each
        call a step makes is a share of its time (``benchmarks/overhead.py``)."""
        loop = self.loop
        since = loop.step
        count, per_step = self._schedule_calls()
        try:
            while not self._steps_until(steps, self._next_due(), per_step):
                if count is not None:  # counted before anything reads the scheduler
                    count(loop.step - since)
                since = loop.step
                self.after_step()
                count, per_step = self._schedule_calls()
                if self.callbacks.stop_requested_by or self._memory_action == "stop":
                    return  # as train()'s loop breaks
        finally:
            if count is not None:
                count(loop.step - since)

    def _steps_until(
        self, steps: Iterator[Sequence[Any]], due: int, per_step: Callable[[], None] | None
    ) -> bool:
        """Lean steps until step ``due`` or a signal (``False``: after_step's turn) or the
        end of ``steps`` (``True``): a loss's inlined where they can be (``step/lean.py``)."""
        stepper, loop, stop = self.stepper, self.loop, self.stop
        if per_step is None and fusable(stepper):
            return loss_steps(stepper, steps, loop, due, stop)
        return plain_steps(stepper, steps, loop, due, stop, per_step)

    def _schedule_calls(self) -> tuple[Callable[[int], None] | None, Callable[[], None] | None]:
        """For lean steps: a count of a flat schedule's steps, or the call per step."""
        if self._step_scheduler is None:  # stepped per evaluation
            return None, None
        count = flat_counter(self.scheduler)
        return count, None if count is not None else self._step_scheduler

    def _next_due(self) -> int:
        """The next step where after_step has work, signals aside: the next log point,
        step-N checkpoint or the run's last step (a memory verdict comes at a log point), or
        where a flat schedule's steps can be counted."""
        step, log, every = self.loop.step, self.cfg.train.log_every, self.cfg.checkpoint.every_steps
        due = min(step - step % log + log, self.total_steps, step + self._until_countable())
        return min(due, step - step % every + every) if every else due

    def _until_countable(self) -> int:  # then a flat schedule's steps are counted at once
        until = steps_until_countable(self.scheduler) if self._step_scheduler else None
        return until or self.total_steps

    def _report_compile(self, seconds: float) -> None:
        """One line on the first compiled step: compilation's time, apart from the steps'."""
        self.compile_s = round(seconds, 3)
        # After a fallback to eager, the warning said it all.
        if self.place.is_main and hasattr(self.stepper.net, "_orig_mod"):
            self.progress.console.print(
                f"train.compile: compiled in {seconds:.1f}s (the first step; not in the "
                "step times)", highlight=False,
            )  # fmt: skip

    def after_step(self) -> None:
        """Log at log points, tell the callbacks, write step-N checkpoints (with what the
        callbacks made of this step), honour a signal at this boundary."""
        step, train = self.loop.step, self.cfg.train
        if step % train.log_every == 0 or step == self.total_steps:
            self.log_window()
        if self._on_step:
            self.notify("on_step_end")
        every = self.cfg.checkpoint.every_steps
        if every and step % every == 0:
            self.checkpointer.save(self.run, self.loggers, [f"step-{step}.pt"])
            if self.place.is_main:
                ckpt.rotate(self.run.checkpoints, self.cfg.checkpoint.keep_last)
        if self._memory_action == "checkpoint":
            self.checkpointer.save(self.run, self.loggers, ["last.pt"])
            self._memory_action = None
        # One process: the flag itself (stop_if_requested's collective is only for N).
        if step % self._stop_every == 0 and (self._stop_collective or self.stop.signum is not None):
            self.stop_if_requested()
        if self.profiler is not None:
            self.profiler.step()
            if self.profiler.done:
                self.end_profile()
        self.clock.mark("other")

    def end_profile(self) -> None:
        """Stop ``train.profile``'s profiler (it writes its trace and table) and say where."""
        if self.profiler is None:
            return
        self.profiler.close()
        for line in self.profiler.summary_lines():
            self.progress.console.print(line, highlight=False, markup=False)
        self.profiler = None

    def log_window(self) -> None:
        """The window's means (its one sync), with the lr, throughput and memory, to the
        loggers (metrics.csv, the progress display, TensorBoard, MLflow, the user's)."""
        means = self.loop.window.means(self.place)
        self.loop.close_window()
        # The loss first, then the step's own metrics, then the lr (the rows' order is stable).
        metrics = {f"train/{n}": means[n] for n in sorted(means, key=lambda n: (n != "loss", n))}
        if not self.loop.optim_window.empty:  # grad_norm, when clipping computes it
            for name, value in self.loop.optim_window.means(self.place).items():
                metrics[f"train/{name}"] = value
            self.loop.optim_window.reset()
        metrics["train/lr"] = self.stepper.optimizer.param_groups[0]["lr"]
        metrics.update(amp_metrics(self.stepper.precision.scaler, self.loop.amp_skipped))
        metrics.update(group_lrs(self.stepper.optimizer))  # train/lr/<name>: optim.groups
        elapsed = self.train_time + time.perf_counter() - self._epoch_started
        metrics["train/samples_per_s"] = self.samples / max(elapsed, 1e-9)
        for name, value in self.clock.window().items():
            metrics[f"train/{name}"] = value
        figures = self.memory.sample() if self.place.is_main else {}  # only rank 0 logs
        metrics.update({f"train/{name}": value for name, value in figures.items()})
        self._watch_memory(figures)
        self._last_window_loss = means.get("loss")
        self._last_logged = metrics
        self.loggers.log_metrics(self.loop.step, metrics)

    def _watch_memory(self, figures: dict[str, float]) -> None:
        """The memory monitor's verdict at this log point, the same on every rank."""
        say = lambda line: self.progress.console.print(  # noqa: E731
            f"[yellow]warning[/]: {line}", highlight=False, soft_wrap=True)
        action = watch_step(self.memwatch, self.loop.step, figures, self.findings, say)
        # Rank 0 samples; all ranks act alike: one collective per log point, and rank 0's
        # verdict sent only the once it has one.
        watching = self.place.distributed and self.memwatch.threshold_mb > 0
        if watching and any_process(action is not None, self.place):
            action = broadcast_object(action, self.place)
        self._memory_action = self._memory_action or action

    def end_of_epoch(self, epoch: int) -> None:
        """Evaluate, keep the best, write last.pt, and let early stopping judge."""
        loop = self.loop
        loop.close_window()
        fresh = {f"train/{k}": v for k, v in loop.epoch_sums.means(self.place).items()}
        finished = loop.step >= self.total_steps or epoch == self.cfg.train.epochs - 1
        val_loader = self.val_loader
        evaluated = val_loader is not None and (
            (epoch + 1) % self.cfg.train.eval_every == 0 or finished
        )
        if val_loader is not None and evaluated:
            val = {f"val/{name}": v for name, v in self.evaluator(val_loader).items()}
            fresh.update(val)
            self.loggers.log_metrics(loop.step, val)
        loop.metrics.update(fresh)
        if evaluated:
            self.callbacks.reserved = fresh  # ctx.log adds names; these are the engine's
            self.notify("on_eval_end", metrics=read_only(fresh))
            self.callbacks.reserved = {}
        fresh.update(self._take_logged())
        if not self._monitor_seen and (evaluated or self.val_loader is None):
            check_reported(self.monitor, fresh, self.callbacks)
            self._monitor_seen = True
        self.run.flush()
        # Only a metric computed this epoch counts towards the best and patience.
        improved = self.monitor in fresh and self.stopper.update(fresh[self.monitor])
        if improved:
            loop.best = {"metric": self.monitor, "value": fresh[self.monitor],
                         "step": loop.step, "epoch": epoch}  # fmt: skip
        if self._per_eval and self.monitor in fresh:
            self.scheduler.step(fresh[self.monitor])
        loop.epoch_done = True
        names = ["best.pt", "last.pt"] if improved else ["last.pt"]
        self.checkpointer.save(self.run, self.loggers, names)
        self.notify("on_checkpoint", checkpoint=tuple(names))
        self.progress.epoch_line(epoch, self.cfg.train.epochs, loop.step, loop.metrics)
        stop_if_diverged(fresh.get("train/loss"), self._last_window_loss, loop.step)

    def _write_logged(self, name: str, value: float) -> None:
        """``ctx.log``: to every logger at this step, and into the run's metrics."""
        self.loggers.log_metrics(self.loop.step, {name: value})
        self.loop.metrics[name] = value

    def _take_logged(self) -> dict[str, float]:
        """What callbacks logged this epoch; on N processes rank 0's, so that every rank
        judges the monitor alike (a callback may log on rank 0 only)."""
        logged = self.callbacks.take_logged()
        if self.place.distributed and self.callbacks.objects:
            logged = broadcast_object(logged, self.place)
            self.loop.metrics.update(logged)
        return logged

    @property
    def samples(self) -> int:
        """Samples trained on by all processes (each rank's share alike)."""
        return self.stepper.samples * self.place.world_size

    def notify(self, event: str, **extra: Any) -> None:
        """Call the callbacks' ``event`` methods with the run's context."""
        if not self.callbacks.has(event):
            return
        metrics = self.loop.metrics
        if event == "on_step_end":  # and the last log point's figures (train/mem/*, ...)
            metrics = {**metrics, **self._last_logged}
        context = {
            "step": self.loop.step,
            "epoch": self.loop.epoch,
            "metrics": read_only(metrics),
            "run_dir": self.run.path if self.place.is_main else None,
            "model": self.model,
            "optimizer": self.stepper.optimizer,
            "loggers": self.loggers.active(),
            "val_loader": self.val_loader,
            **extra,
        }
        self.callbacks.call(event, **context)

    def _should_stop(self) -> bool:
        return self.stopper.should_stop or self.callbacks.stop_requested_by is not None

    def _start(self, resumed: bool) -> tuple[int, int]:
        """The epoch to start in and the optimizer steps of it already taken."""
        loop = self.loop
        if not resumed:
            return 0, 0
        if loop.epoch_done:
            return loop.epoch + 1, 0
        return loop.epoch, loop.steps_into_epoch
