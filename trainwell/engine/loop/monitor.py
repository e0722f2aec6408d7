"""Which metric the run watches (early stopping and ``best.pt``), checked before step 1.

A monitor that names no metric would keep no ``best.pt`` and never stop early; found
after a whole epoch, it would leave a failed run behind. So it is checked against every
name the run can report, known before the first step:

- the step's own metrics on the dry batch (``train/`` for the train step's, ``val/`` for
  the eval step's; the loss-built step: ``loss``, and ``accuracy`` for classes): what an
  epoch's end reports (``train/lr`` and the machine's figures are logged, not judged);
- the ``train.metrics`` objects (``val/NAME``, and ``val/NAME/key`` for a mapping result);
- the names callbacks declare they ``ctx.log`` (``logs = ("val/score",)``).

A callback that declares nothing may log any name, so with one a name outside that list
is checked at the end of the first evaluation instead (after ``on_eval_end``). A ``test/``
monitor is always refused (the test split is evaluated after training), and so is a
``val/`` one in a run without validation data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainwell.engine.build.metric_objects import SplitMetrics
from trainwell.engine.state.callbacks import Callbacks
from trainwell.engine.state.early_stopping import EarlyStopConfig, resolve_monitor
from trainwell.errors import UserError

if TYPE_CHECKING:
    from trainwell.engine.build.preflight import Task

KEY = "early_stop.monitor"


@dataclass(frozen=True)
class KnownMetrics:
    """The metric names a run can report, as far as they are known before step 1.

    Example:
        >>> known = KnownMetrics(frozenset({"val/loss"}), ("val/f1/",))
        >>> "val/loss" in known, "val/f1/macro" in known, "val/acc" in known
        (True, True, False)
    """

    names: frozenset[str]
    groups: tuple[str, ...] = ()
    # Callbacks that declare no `logs`: they may ctx.log a name no one can know yet.
    open_to: tuple[str, ...] = ()

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.names or name.startswith(self.groups))

    def of_split(self, split: str) -> list[str]:
        shown = {n for n in self.names if n.startswith(f"{split}/")}
        shown |= {f"{g}*" for g in self.groups if g.startswith(f"{split}/")}
        return sorted(shown)


def known_metrics(
    task: Task,
    has_val: bool,
    objects: SplitMetrics | None,
    callbacks: Callbacks,
) -> KnownMetrics:
    """Every name the run can report (see the module)."""
    names = {f"train/{n}" for n in task.train_metrics or {"loss"}}
    groups: list[str] = []
    evaluated = set(task.eval_metrics or ({"loss", "accuracy"} if task.classification
                                           else {"loss"}))  # fmt: skip
    if has_val:  # test/ is never a monitor: its names need not be known
        names |= {f"val/{n}" for n in evaluated}
        for name in objects.names if objects is not None else ():
            names.add(f"val/{name}")
            groups.append(f"val/{name}/")
    declared, silent = callbacks.declared_logs()
    return KnownMetrics(frozenset(names | declared), tuple(groups), tuple(silent))


def choose_monitor(
    cfg: EarlyStopConfig,
    task: Task,
    has_val: bool,
    objects: SplitMetrics | None,
    callbacks: Callbacks,
) -> tuple[str, str]:
    """The run's (monitor, mode), refused with one line if it names no metric."""
    higher = objects.higher_is_better() if objects is not None else {}
    higher_is_better = {f"val/{n}": v for n, v in higher.items()}
    monitor, mode = resolve_monitor(cfg, has_val, task.has_accuracy, higher_is_better)
    check_monitor(monitor, known_metrics(task, has_val, objects, callbacks), has_val)
    return monitor, mode


def check_monitor(monitor: str, known: KnownMetrics, has_val: bool) -> None:
    """Refuse, before step 1, a monitor that no metric of the run can be.

    Example:
        >>> check_monitor("val/acuracy", KnownMetrics(frozenset({"val/accuracy"})), True)
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: early_stop.monitor: 'val/acuracy' is not a metric of ...
    """
    split = monitor.partition("/")[0]
    if split == "test":
        raise UserError(
            f"{KEY}: {monitor!r}: the test split is evaluated once, after training, so it "
            "cannot pick the best checkpoint or stop early; monitor a val/ metric"
        )
    if monitor in known or known.open_to:
        return  # with callbacks that may log it: checked at the first evaluation's end
    if split == "val" and not has_val:
        raise UserError(
            f"{KEY}: {monitor!r} needs validation data, and this run has none; give "
            "val_data (or a data set with a val split), or monitor a train/ metric"
        )
    shown = ", ".join(known.of_split(split)) or f"no {split}/ metric"
    raise UserError(
        f"{KEY}: {monitor!r} is not a metric of this run; it has {shown} (a callback that "
        f"logs it with ctx.log declares it: logs = ({monitor!r},))"
    )


def check_reported(monitor: str, fresh: Mapping[str, float], callbacks: Callbacks) -> None:
    """At the end of the first evaluation: a monitor no metric and no callback reported."""
    if monitor in fresh:
        return
    split = monitor.partition("/")[0]
    shown = ", ".join(sorted(k for k in fresh if k.startswith(f"{split}/"))) or (
        f"no {split}/ metric")  # fmt: skip
    _, silent = callbacks.declared_logs()
    by = f"; callbacks {', '.join(silent)} did not ctx.log it" if silent else ""
    raise UserError(f"{KEY}: {monitor!r} is not a metric of this run; it has {shown}{by}")
