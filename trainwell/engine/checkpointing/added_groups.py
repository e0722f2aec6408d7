"""Parameter groups added while training runs, as fine-tuning does (Lightning's
``unfreeze_and_add_param_group``, or ``ctx.optimizer.add_param_group(...)`` in a callback).

Three things make such a group work like the others:

- **the move**: the engine's optimizer already holds every parameter, frozen ones
  included, so ``add_param_group`` with parameters that are in a group moves them (and
  their optimizer state) to the new group instead of refusing them;
- **the schedule**: before the next optimizer step the scheduler learns the new group
  (its lr is the group's peak lr, ``initial_lr``, which the schedule scales from then on,
  as it scales ``optim.lr``); torch's schedulers would otherwise fail on the mismatch
  (``zip() argument 2 is shorter than argument 1``);
- **the resume**: every checkpoint records which parameters (by name) each group holds
  (``optim_layout``) and which are frozen (``frozen``); a resume re-adds the groups added
  at run time, moving their parameters out of the configured groups, before it loads the
  optimizer's state, and freezes and unfreezes as the checkpoint says (a callback that
  unfroze a part before the checkpoint need not do it again).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainwell.errors import UserError

# Per-group keys of OneCycleLR scaled with the group's own lr; momentum keys copied.
_ONECYCLE_LRS = ("initial_lr", "min_lr")
_ONECYCLE_COPIED = ("max_momentum", "base_momentum")


def track_added_groups(optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    """Let ``optimizer.add_param_group`` move parameters already held, and keep
    ``scheduler`` in step with the groups it adds (told before the next optimizer step, by
    a pre-hook that the call registers and that removes itself: nothing runs per step in
    a run that adds no group).

    Example:
        >>> net = nn.Linear(2, 2)
        >>> opt = torch.optim.SGD([net.weight], lr=0.1)
        >>> sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5)
        >>> track_added_groups(opt, sched)
        >>> opt.add_param_group({"params": [net.weight, net.bias], "lr": 0.01})
        >>> [len(g["params"]) for g in opt.param_groups]
        [0, 2]
        >>> opt.step(); sched.step(); [g["lr"] for g in opt.param_groups]
        [0.05, 0.005]
        >>> len(opt._optimizer_step_pre_hooks)  # the scheduler was told: the hook is gone
        0
    """
    cls_add = type(optimizer).add_param_group
    known = [len(optimizer.param_groups)]
    pending: list[Any] = []  # the registered pre-hook's handle, until it has run

    def before_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        pending.pop().remove()
        if len(opt.param_groups) != known[0]:
            known[0] = len(opt.param_groups)
            sync_scheduler(scheduler, opt)

    def add_param_group(param_group: dict[str, Any]) -> None:
        params = param_group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        moving = {id(p) for p in params}
        for group in optimizer.param_groups:
            if any(id(p) in moving for p in group["params"]):
                # Emptied groups stay: the scheduler's lists are indexed by group.
                group["params"] = [p for p in group["params"] if id(p) not in moving]
        cls_add(optimizer, {**param_group, "params": params})
        if not pending:
            pending.append(optimizer.register_step_pre_hook(before_step))

    optimizer.add_param_group = add_param_group  # type: ignore[method-assign]


def sync_scheduler(scheduler: Any, optimizer: torch.optim.Optimizer) -> None:
    """Give ``scheduler`` (and the schedulers inside a SequentialLR / ChainedScheduler)
    an entry for each group it does not know yet; a LambdaLR sets their lr at once."""
    groups = optimizer.param_groups
    for group in groups:
        _fill_initial(group, groups[0])
    for sched in _tree(scheduler):
        known = len(getattr(sched, "_last_lr", None) or [])
        _extend_lists(sched, groups)
        if isinstance(sched, torch.optim.lr_scheduler.LambdaLR) and sched.last_epoch >= 0:
            for i, group in enumerate(groups[known:], start=known):
                group["lr"] = group["initial_lr"] * sched.lr_lambdas[i](sched.last_epoch)
                sched._last_lr[i] = group["lr"]


def _extend_lists(sched: Any, groups: list[dict[str, Any]]) -> None:
    """Each per-group list of ``sched`` gets an entry for the groups it lacks."""
    bases = [g["initial_lr"] for g in groups]
    first_base = (getattr(sched, "base_lrs", None) or [0.0])[0]
    max_lrs = getattr(sched, "max_lrs", None)  # CyclicLR: the same ratio to the base
    if isinstance(max_lrs, list) and max_lrs:
        ratio = max_lrs[0] / first_base if first_base else 1.0
        _extend(sched, "max_lrs", [b * ratio for b in bases])
    _extend(sched, "base_lrs", bases)
    _extend(sched, "_last_lr", [g["lr"] for g in groups])
    for attr in ("lr_lambdas", "min_lrs"):  # LambdaLR's schedule, ReduceLROnPlateau's floor
        values = getattr(sched, attr, None)
        if isinstance(values, list) and values:
            _extend(sched, attr, [values[0]] * len(groups))


def _tree(scheduler: Any) -> list[Any]:
    inner = getattr(scheduler, "_schedulers", None) or []
    return [scheduler, *(s for sub in inner for s in _tree(sub))]


def _extend(sched: Any, attr: str, values: list[Any]) -> None:
    """``values`` has one entry per group: the list gets those of the groups it lacks."""
    current = getattr(sched, attr, None)
    if isinstance(current, list):
        current.extend(values[len(current) :])


def _fill_initial(group: dict[str, Any], first: dict[str, Any]) -> None:
    """The keys a scheduler sets on each group at its construction, for a later group."""
    if "initial_lr" in group:
        return
    if "max_lr" in first and "max_lr" not in group:  # OneCycleLR: the lr given is the peak
        group["max_lr"] = peak = group["lr"]
        for key in _ONECYCLE_LRS:
            if key in first and first["max_lr"]:
                group[key] = peak * first[key] / first["max_lr"]
        for key in _ONECYCLE_COPIED:
            if key in first:
                group[key] = first[key]
    group.setdefault("initial_lr", group["lr"])


def layout(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """For the checkpoint: each group's parameter names (``None`` for a tensor outside
    the model) and its settings (plain values only: it loads with ``weights_only``)."""
    names = {id(p): n for n, p in model.named_parameters()}
    return [
        {"params": [names.get(id(p)) for p in g["params"]],
         "settings": {k: v for k, v in g.items() if k != "params" and _plain(v)}}
        for g in optimizer.param_groups
    ]  # fmt: skip


def frozen(model: nn.Module) -> list[str]:
    """For the checkpoint: the names of the parameters frozen now (``requires_grad``
    is training state: a part unfrozen by a callback stays unfrozen on resume)."""
    return [n for n, p in model.named_parameters() if not p.requires_grad]


def restore_frozen(model: nn.Module, names: list[str] | None) -> None:
    """Freeze exactly the parameters the checkpoint names (nothing for one without)."""
    if names is None:
        return
    names_set = set(names)
    for n, p in model.named_parameters():
        if p.requires_grad == (n in names_set):
            p.requires_grad_(n not in names_set)


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str, torch.Tensor))


def restore_layout(
    model: nn.Module, optimizer: torch.optim.Optimizer, saved: list[dict[str, Any]] | None
) -> None:
    """Re-add the groups the checkpoint's run added at run time (their parameters moved
    out of the configured groups), so that its optimizer state fits; nothing to do for a
    checkpoint without added groups, or one from before layouts were recorded.

    Raises :class:`UserError` when the configured groups themselves differ from the
    checkpoint's (``optim.groups`` changed): that state cannot carry over.
    """
    if not saved:
        return
    current = layout(model, optimizer)
    wanted = [g["params"] for g in saved]
    if wanted == [g["params"] for g in current]:
        return
    built = len(current)
    added = {name for names in wanted[built:] for name in names}
    same = len(wanted) >= built and all(
        [n for n in current[i]["params"] if n not in added] == wanted[i] for i in range(built)
    )
    if not same or None in added:
        raise UserError(
            f"the checkpoint's optimizer has other parameter groups ({_sizes(wanted)} "
            f"parameters) than this run builds ({_sizes([g['params'] for g in current])}): "
            "optim.groups or the model changed since the checkpoint; its optimizer state "
            "cannot carry over. Start a new run (another run.dir) instead of resuming"
        )
    by_name = dict(model.named_parameters())
    for group in optimizer.param_groups:
        group["params"] = [p for p, n in zip(group["params"], _names(model, group))
                           if n not in added]  # fmt: skip
    for entry in saved[built:]:
        params = [by_name[n] for n in entry["params"]]
        type(optimizer).add_param_group(optimizer, {**entry["settings"], "params": params})


def _names(model: nn.Module, group: dict[str, Any]) -> list[str | None]:
    names = {id(p): n for n, p in model.named_parameters()}
    return [names.get(id(p)) for p in group["params"]]


def _sizes(groups: list[list[Any]]) -> str:
    return " + ".join(str(len(g)) for g in groups) or "none"
