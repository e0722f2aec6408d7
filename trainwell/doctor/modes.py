"""The modes-and-data probes: dropout / batch norm in the wrong mode, a
DistributedSampler that repeats its order, labels out of range, probabilities fed to a
loss that wants logits, and a loop that waits for its data.
"""

from __future__ import annotations

import ast
import math
import os
import time
import weakref
from typing import Any

import torch
from torch import nn

from trainwell.doctor.findings import Finding
from trainwell.doctor.frame import (
    BatchEvent,
    CreatedEvent,
    ForwardEvent,
    LossEvent,
    Site,
    StepEvent,
    is_user_file,
)
from trainwell.doctor.source import parse
from trainwell.env import usable_cores

_DROPOUT = nn.modules.dropout._DropoutNd
_NORM = nn.modules.batchnorm._BatchNorm


def _mode_modules(model: nn.Module, cache: weakref.WeakKeyDictionary) -> list[nn.Module]:
    """The dropout (p > 0) and batch-norm (with running statistics) modules of ``model``:
    the ones whose output depends on train/eval mode. Cached per model."""
    found = cache.get(model)
    if found is None:
        found = cache[model] = [
            m
            for m in model.modules()
            if (isinstance(m, _DROPOUT) and m.p > 0)
            or (isinstance(m, _NORM) and m.track_running_stats)
        ]
    return found


# ---- train-mode-in-eval -----------------------------------------------------------------------


class TrainModeInEvalProbe:
    """``train-mode-in-eval``: a model forwarded under ``no_grad`` / ``inference_mode``
    twice with no optimizer step between (an evaluation loop) while its dropout or
    batch-norm modules are in training mode.

    Left alone, as deliberate: a single no-grad forward per training step (a GAN's
    generator making samples for the discriminator); a model no optimizer trains (a
    momentum encoder or BYOL target network, fed two views per step); a model in eval
    mode whose dropout alone was switched back on (Monte Carlo dropout); batch norms with
    ``momentum=None`` (precise-BN statistics recomputed under no_grad); forwards from
    library code (``swa_utils.update_bn``).
    """

    def __init__(self) -> None:
        self.cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # id(model) -> (optimizer steps so far, no-grad forwards since, first one's site)
        self.run: dict[int, tuple[int, int, Site | None]] = {}
        self.optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self.trained: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()
        self.reported = False

    def on_optimizer_created(self, doc: Any, event: CreatedEvent) -> None:
        self.optimizers.add(event.obj)

    def _trained(self, model: nn.Module) -> bool:
        """Whether an optimizer holds the model's weights (True when none is known);
        cached per model once an optimizer is known (an evaluation calls it per batch)."""
        if not len(self.optimizers):
            return True
        known = self.trained.get(model)
        if known is None:
            held = {id(p) for o in self.optimizers for g in o.param_groups for p in g["params"]}
            known = self.trained[model] = any(id(p) in held for p in model.parameters())
        return known

    def on_forward(self, doc: Any, event: ForwardEvent) -> None:
        if event.grad_enabled or self.reported:
            return
        model = event.module
        modules = _mode_modules(model, self.cache)
        training = [m for m in modules if m.training]
        if not model.training or not training:
            self.run.pop(id(model), None)
            return
        if any(isinstance(m, _NORM) and m.momentum is None for m in training):
            return  # cumulative statistics: precise BN, recomputed on purpose
        if not event.caller_is_user() or not self._trained(model):
            return
        step, count, site = self.run.get(id(model), (doc.steps, 0, None))
        if step != doc.steps:  # an optimizer step came between: not one evaluation
            count, site = 0, None
        count, site = count + 1, site or event.site
        self.run[id(model)] = (doc.steps, count, site)
        if count >= 2 and site is not None:
            self.reported = True
            training = [type(m).__name__ for m in modules if m.training]
            doc.add(
                Finding(
                    code="train-mode-in-eval",
                    severity="error",
                    file=site.file,
                    line=site.line,
                    message=f"evaluation under no_grad with {type(event.module).__name__} in "
                    f"training mode: {len(training)} dropout/batch-norm module(s) "
                    f"({', '.join(sorted(set(training)))}) behave as in training",
                    why="dropout drops units at random and batch norm normalizes with the "
                    "batch's statistics (and updates its running ones): the metrics are "
                    "noisy and wrong, and evaluation changes the model",
                    fix="call model.eval() before evaluating and model.train() before "
                    "training again",
                    evidence={"modules": sorted(set(training))},
                )
            )



# ---- eval-mode-in-train -----------------------------------------------------------------------


class EvalModeInTrainProbe:
    """``eval-mode-in-train``: a container module (a model, a backbone) in eval mode
    whose dropout modules, or batch norms with trainable weights, are updated by the
    optimizer: ``model.eval()`` for validation never undone, a pretrained backbone
    loaded in eval mode.

    Batch norms put in eval one by one (frozen statistics while fine-tuning) are a
    deliberate choice and stay silent, as do eval-mode parts whose weights are frozen,
    and, with no evaluation since, an ``eval()`` on a part right after ``train()`` on
    the whole (``norm_eval``) or inside the training loop itself (keeping a backbone's
    statistics frozen each epoch). An ``eval()`` followed by no-grad forwards (an
    evaluation) and then training is the forgotten ``model.train()``. Checked at the
    first steps and at the first steps after each mode switch.
    """

    CHECKS = 2  # steps looked at after each mode switch

    def __init__(self) -> None:
        self.eval_sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.forwards: dict[int, tuple[Any, Site | None]] = {}  # this step's models
        self.left = self.CHECKS
        self.last_train: Any = None  # weak ref to the module of the last train() call
        self.forward_since_train = False

    def on_mode(self, doc: Any, event: CreatedEvent) -> None:
        module = event.obj
        if event.mode:
            self.last_train, self.forward_since_train = weakref.ref(module), False
        else:
            # model.train(); model.backbone.eval(): the backbone's statistics frozen on
            # purpose, the way detection codebases do it (norm_eval).
            parent = self.last_train() if self.last_train is not None else None
            refrozen = (
                parent is not None
                and parent is not module
                and not self.forward_since_train
                and any(m is module for m in parent.modules())
            )
            self.eval_sites[module] = _EvalRecord(event.site, module, refrozen)
        self.left = self.CHECKS

    def on_forward(self, doc: Any, event: ForwardEvent) -> None:
        self.forward_since_train = True
        if event.grad_enabled and not self.left:
            return  # the common case: training, no mode switched lately
        if not event.grad_enabled:
            # An evaluation: of the module put in eval or of one of its parts
            # (validation through model.encoder(...) or a generate() method).
            for record in self.eval_sites.values():
                if id(event.module) in record.parts:
                    record.evaluated = True
        elif self.left and _mode_modules(event.module, self.cache):
            self.forwards.setdefault(id(event.module), (weakref.ref(event.module), event.site))

    def on_step(self, doc: Any, event: StepEvent) -> None:
        if not self.left:
            return
        self.left -= 1
        forwards, self.forwards = self.forwards, {}
        for ref, site in forwards.values():
            model = ref()
            if model is not None:
                self._check(doc, model, site)

    def _check(self, doc: Any, model: nn.Module, train_site: Site | None) -> None:
        if all(m.training for m in _mode_modules(model, self.cache)):
            return  # the common case (model.train() called every step): nothing in eval
        for name, module in model.named_modules():
            if module.training or not any(True for _ in module.children()):
                continue
            stuck = [
                m
                for m in _mode_modules(module, self.cache)
                if not m.training
                and (
                    isinstance(m, _DROPOUT)
                    or any(p.requires_grad and p.grad is not None for p in m.parameters())
                )
            ]
            trained = any(p.requires_grad and p.grad is not None for p in module.parameters())
            if not stuck or not trained:
                continue
            record = self.eval_sites.get(module)
            on_purpose = record is not None and not record.evaluated and (
                record.refrozen or _in_loop_with(record.stack, train_site)
            )
            if on_purpose:
                return  # frozen statistics: right after train(), or each time round the loop
            site = (record.site if record is not None else None) or train_site
            if site is None:
                return
            related = []
            if train_site is not None and (train_site.file, train_site.line) != (
                site.file,
                site.line,
            ):
                related.append({"file": train_site.file, "line": train_site.line,
                                "what": "training forward"})  # fmt: skip
            label = name or type(model).__name__
            kinds = sorted({type(m).__name__ for m in stuck})
            doc.add(
                Finding(
                    code="eval-mode-in-train",
                    severity="error",
                    file=site.file,
                    line=site.line,
                    message=f"{label} is in eval mode while it trains: {len(stuck)} "
                    f"module(s) ({', '.join(kinds)}) run as in evaluation",
                    why="dropout is off (no regularization) and batch norm uses frozen "
                    "running statistics instead of the batch's: the model trains "
                    "differently from what you designed, often worse",
                    fix="call model.train() at the start of every training epoch (after "
                    "each evaluation); to freeze batch-norm statistics on purpose, set "
                    "only the BatchNorm modules to eval and freeze their weights",
                    related=related,
                    evidence={"module": label, "modules_in_eval": kinds},
                )
            )
            return  # the outermost one says it all


class _EvalRecord:
    """Where a module was put in eval mode, and what happened since."""

    def __init__(self, site: Site | None, module: nn.Module, refrozen: bool) -> None:
        self.site = site
        self.stack = _user_stack()  # every user line on the stack at the eval() call
        self.parts = {id(m) for m in module.modules()}
        self.refrozen = refrozen
        self.evaluated = False  # a no-grad forward of it since


def _user_stack() -> list[tuple[str, int]]:
    """(file, line) of every user frame on the stack, innermost first."""
    import sys

    frames, frame = [], sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            frames.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return frames


def _in_loop_with(stack: list[tuple[str, int]], site: Site | None) -> bool:
    """Whether one of the lines in ``stack`` sits in a loop that also holds ``site``."""
    if site is None:
        return False
    for file, line in stack:
        if file != site.file:
            continue
        tree = parse(file)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.For, ast.While, ast.AsyncFor)) and (
                node.lineno <= line <= node.end_lineno
                and node.lineno <= site.line <= node.end_lineno
            ):
                return True
    return False


# ---- sampler-epoch-not-set ------------------------------------------------------------------


class SamplerEpochProbe:
    """``sampler-epoch-not-set``: a shuffling ``DistributedSampler`` starting another pass
    with the epoch number of a pass already done: it yields that pass's order again.

    A pass counts once half of it has been read (``next(iter(loader))`` to peek at a
    batch is not an epoch). Samplers are told apart by their dataset, seed and rank, so
    a sampler made anew each epoch (always at epoch 0) is seen too.
    """

    def __init__(self) -> None:
        self.done: dict[tuple, int] = {}  # sampler key -> epoch of the last pass read
        self.reading: dict[int, tuple[tuple, int, int]] = {}  # id(iterator) -> key, epoch, half

    def on_batch(self, doc: Any, event: BatchEvent) -> None:
        reading = self.reading.get(id(event.loader)) if self.reading else None
        if reading is not None and event.index >= reading[2]:
            del self.reading[id(event.loader)]
            self.done[reading[0]] = reading[1]
        if event.index != 1:
            return
        from torch.utils.data.distributed import DistributedSampler

        sampler = getattr(event.loader, "_index_sampler", None)
        try:
            batches = len(sampler)
        except TypeError:  # an IterableDataset's sampler has no length
            return
        sampler = getattr(sampler, "sampler", sampler)
        if not isinstance(sampler, DistributedSampler) or not sampler.shuffle:
            return
        key = (id(sampler.dataset), sampler.seed, sampler.rank, sampler.num_replicas)
        self.reading[id(event.loader)] = (key, sampler.epoch, max(2, batches // 2))
        if self.done.get(key) != sampler.epoch or event.site is None:
            return
        doc.add(
            Finding(
                code="sampler-epoch-not-set",
                severity="error",
                file=event.site.file,
                line=event.site.line,
                message="a shuffling DistributedSampler starts another epoch with epoch "
                f"still {sampler.epoch}: every epoch sees the same order",
                why="DistributedSampler seeds its shuffle with seed + epoch; without "
                "set_epoch the 'shuffle' is one fixed permutation",
                fix="call sampler.set_epoch(epoch) at the start of each epoch, before "
                "iterating the DataLoader",
                evidence={"epoch": sampler.epoch},
            )
        )


# ---- labels, probabilities and the first loss ---------------------------------------------


_PASS_THROUGH = ("ToCopyBackward", "ViewBackward", "ReshapeAliasBackward", "SqueezeBackward",
                 "UnsqueezeBackward", "CloneBackward", "PermuteBackward", "TBackward",
                 "TransposeBackward", "AliasBackward", "UnsafeViewBackward",
                 "ClampBackward", "ClampMinBackward", "ClampMaxBackward")  # fmt: skip


def _producer(t: torch.Tensor) -> str:
    """The name of the operation that made ``t``, looking through copies and views."""
    node = t.grad_fn
    for _ in range(4):
        if node is None:
            return ""
        name = type(node).__name__
        if not name.startswith(_PASS_THROUGH):
            return name
        nxt = [n for n, _ in node.next_functions if n is not None]
        node = nxt[0] if nxt else None
    return ""


class LossInputsProbe:
    """``label-out-of-range``, ``softmax-before-loss`` and ``loss-at-init`` at the
    classification losses.

    The first ``ALWAYS`` calls are looked at (a min and a max of the labels: on a GPU
    reading them makes the host wait, so only then), which catches the bug before CUDA's
    device-side assert; later, a bad label in one batch raises PyTorch's IndexError on
    the CPU, which the crash report explains. Probabilities are recognized by the
    operation that made them (softmax, sigmoid).
    """

    ALWAYS = 64  # calls looked at

    def __init__(self) -> None:
        self.calls = 0
        self.first_done = False

    def on_loss(self, doc: Any, event: LossEvent) -> None:
        input, target = event.input, event.target
        if not isinstance(input, torch.Tensor) or not isinstance(target, torch.Tensor):
            return
        self.calls += 1
        if self.calls > self.ALWAYS:
            # The wiring is the same every step; a bad label in a later batch raises
            # PyTorch's IndexError on the CPU, which the crash report explains.
            doc.unsubscribe(self, "on_loss")
            return
        self._softmax(doc, event)
        # The first loss is worth computing only with labels in range (else it raises).
        labels_ok = self._labels_ok(doc, event)
        if labels_ok and not self.first_done and input.requires_grad and doc.steps == 0:
            self.first_done = True
            self._first_loss(doc, event)

    def _labels_ok(self, doc: Any, event: LossEvent) -> bool:
        """False when the targets are out of range (and reported), else True."""
        target = event.target
        if event.name in ("cross_entropy", "nll_loss"):
            return self._class_labels(doc, event)
        if target.is_floating_point() and target.numel():
            lo, hi = torch.aminmax(target.detach())
            if lo < 0 or hi > 1:
                hint = ("binary targets must be probabilities in [0, 1]; for class indices "
                        "use CrossEntropyLoss")  # fmt: skip
                self._report_labels(doc, event, float(lo), float(hi), "[0, 1]", hint)
                return False
        return True

    def _class_labels(self, doc: Any, event: LossEvent) -> bool:
        input, target = event.input, event.target
        if target.is_floating_point() or not target.numel():
            return True  # class probabilities (soft targets)
        classes = input.shape[1] if input.dim() >= 2 else input.shape[0]
        if input.dim() >= 3 and tuple(target.shape) != (input.shape[0], *input.shape[2:]):
            return True  # a shape bug ((N, T, C) logits not transposed): PyTorch names it
        target = target.detach()
        lo, hi = torch.aminmax(target)
        if lo >= 0 and hi < classes:
            return True  # the common case: one reduction, no mask
        ignore = event.kwargs.get("ignore_index", -100)
        valid = target[target != ignore]
        if not valid.numel():
            return True
        lo, hi = (int(v) for v in torch.aminmax(valid))
        if lo >= 0 and hi < classes:
            return True
        if lo >= 1 and hi == classes:
            hint = "the labels look 1-based: use y - 1"
        elif hi >= classes:
            hint = (f"the model has {classes} outputs: make it {hi + 1} (the number of "
                    "classes), or remap the labels to 0..C-1")  # fmt: skip
        else:
            hint = "negative labels: map them to 0..C-1 or to ignore_index"
        self._report_labels(doc, event, lo, hi, f"[0, {classes})", hint)
        return False

    def _report_labels(
        self, doc: Any, event: LossEvent, lo: float, hi: float, expected: str, hint: str
    ) -> None:
        site = event.site
        if site is None:
            return
        doc.add(
            Finding(
                code="label-out-of-range",
                severity="error",
                file=site.file,
                line=site.line,
                message=f"{event.name} targets range over [{lo:g}, {hi:g}] but must lie in "
                f"{expected}",
                why="on a GPU this is the cryptic 'device-side assert triggered'; on the "
                "CPU an IndexError; with binary losses it trains silently on nonsense",
                fix=hint,
                evidence={"min": lo, "max": hi, "expected": expected},
            )
        )

    def _softmax(self, doc: Any, event: LossEvent) -> None:
        made_by = _producer(event.input)
        if event.name in ("cross_entropy", "nll_loss") and made_by.startswith("SoftmaxBackward"):
            what = "softmax probabilities"
            fix = ("pass the raw logits (drop the softmax; apply it only to report "
                   "probabilities)")  # fmt: skip
            if event.name == "nll_loss":
                fix = "use F.log_softmax instead of softmax before nll_loss"
        elif event.name == "binary_cross_entropy_with_logits" and made_by.startswith(
            "SigmoidBackward"
        ):
            what = "sigmoid probabilities"
            fix = "pass the raw logits (drop the sigmoid)"
        else:
            return
        site = event.site
        if site is None:
            return
        doc.add(
            Finding(
                code="softmax-before-loss",
                severity="error",
                file=site.file,
                line=site.line,
                message=f"{event.name} is given {what}, but it applies "
                f"{'the sigmoid' if 'binary' in event.name else 'log-softmax'} itself",
                why="squashing twice flattens the gradients: the loss can barely move and "
                "the model learns slowly or stalls",
                fix=fix,
                evidence={"producer": made_by},
            )
        )

    def _first_loss(self, doc: Any, event: LossEvent) -> None:
        """The first training loss of a fresh classifier should be about ln C."""
        input, target = event.input.detach(), event.target.detach()
        kwargs = event.kwargs
        if kwargs.get("weight") is not None or kwargs.get("label_smoothing", 0.0):
            return
        if input.device != target.device:
            return  # the loss call itself will fail: device-mismatch explains it
        if input.dim() >= 3 and tuple(target.shape) != (input.shape[0], *input.shape[2:]):
            return  # a shape bug: the loss call will name it
        if event.name == "cross_entropy" and input.dim() >= 2 and input.shape[1] > 1:
            classes = input.shape[1]
            if target.is_floating_point():
                return
            ignore = kwargs.get("ignore_index", -100)
            with doc.muted():
                value = torch.nn.functional.cross_entropy(input.float(), target,
                                                          ignore_index=ignore)  # fmt: skip
                # With the targets of other samples: a margin loss (ArcFace, CosFace)
                # lowers the true class's logit by design; then only the true classes'
                # loss is high, not every class's.
                others = torch.nn.functional.cross_entropy(
                    input.float(), target.roll(1, 0), ignore_index=ignore
                )
            if target.numel() > 1 and float(others) <= max(3 * math.log(classes),
                                                           math.log(classes) + 2):  # fmt: skip
                return
        elif event.name == "binary_cross_entropy_with_logits" and target.is_floating_point():
            classes = 2
            with doc.muted():
                value = torch.nn.functional.binary_cross_entropy_with_logits(
                    input.float(), target.float()
                )
        else:
            return
        value = float(value)
        expected = math.log(classes)
        if not math.isfinite(value) or value <= max(3 * expected, expected + 2):
            return
        site = event.site
        if site is None:
            return
        std = float(input.float().std()) if input.numel() > 1 else 0.0
        doc.add(
            Finding(
                code="loss-at-init",
                severity="warning",
                file=site.file,
                line=site.line,
                message=f"the first loss is {value:.3g}; a fresh {classes}-class classifier "
                f"gives about ln({classes}) = {expected:.3g} (its logits have std {std:.3g})",
                why="an untrained model should be unsure; a much higher loss means "
                "confidently wrong logits from the start: unnormalized inputs, an init "
                "scaled too large, or a bug in the loss; the first steps go into undoing it",
                fix="normalize the inputs (e.g. x / 255, or subtract the mean and divide by "
                "the std), use the default init (or scale the last layer's weights down), "
                "and check what is fed to the loss",
                evidence={"first_loss": value, "expected": expected, "logit_std": std},
            )
        )


# ---- data-bottleneck ----------------------------------------------------------------------


class DataBottleneckProbe:
    """``data-bottleneck``: the loop spends most of its time waiting for batches.

    For each DataLoader, the time ``next()`` takes is compared to the time between two
    batches (the wait plus the work on the previous batch), after the first batches of
    each pass (worker start-up). Judged over ``WINDOW`` batches; a short wait is never a
    bottleneck worth a warning, whatever its share.
    """

    SKIP = 3
    WINDOW = 30
    SHARE = 0.5
    MIN_WAIT_S = 0.005

    def __init__(self) -> None:
        # id(dataset) -> [wait, total, batches counted, last arrival, batches seen]
        self.loaders: dict[int, list[float]] = {}
        self.reported: set[int] = set()

    def on_batch(self, doc: Any, event: BatchEvent) -> None:
        now = time.perf_counter()
        key = id(event.loader._dataset)
        if key in self.reported:
            return
        st = self.loaders.setdefault(key, [0.0, 0.0, 0, 0.0, 0])
        last, st[3] = st[3], now
        st[4] += 1
        # The first batches of the data set warm up; a new iterator later (a new epoch,
        # or next(iter(loader)) every step) is part of the cost.
        if st[4] <= self.SKIP or event.index == 1 and st[4] <= 2 * self.SKIP:
            return
        st[0] += event.wait_s
        st[1] += now - last
        st[2] += 1
        if st[2] % self.WINDOW:
            return
        share, mean_wait = st[0] / max(st[1], 1e-9), st[0] / st[2]
        if share >= self.SHARE and mean_wait >= self.MIN_WAIT_S and event.site is not None:
            self.reported.add(key)
            doc.add(_bottleneck(event, share, mean_wait))


def _bottleneck(event: BatchEvent, share: float, mean_wait: float) -> Finding:
    it = event.loader
    workers = it._num_workers
    settings = {
        "num_workers": workers,
        "pin_memory": it._pin_memory,
        "persistent_workers": getattr(it, "_persistent_workers", False),
        "batch_size": getattr(getattr(it, "_index_sampler", None), "batch_size", None),
    }
    cores = usable_cores() or os.cpu_count() or 1
    changes = []
    if workers == 0:
        changes.append(f"num_workers={min(8, max(2, cores))} (this machine has {cores} cores)")
    elif workers < cores:
        changes.append(f"more workers (num_workers={min(cores, 2 * workers)})")
    if workers and not settings["persistent_workers"]:
        changes.append("persistent_workers=True (workers are not restarted every epoch)")
    if torch.cuda.is_available() and not settings["pin_memory"]:
        changes.append("pin_memory=True with .to(device, non_blocking=True)")
    changes.append("move per-sample work out of __getitem__ (decode / resize once ahead of "
                   "time and cache tensors; augment on the GPU in batches)")  # fmt: skip
    return Finding(
        code="data-bottleneck",
        severity="warning",
        file=event.site.file,
        line=event.site.line,
        message=f"{share:.0%} of the loop's time is spent waiting for the next batch "
        f"({mean_wait * 1000:.1f} ms per batch) with num_workers={workers}",
        why="the model sits idle while batches are prepared: training runs at the speed of "
        "the data pipeline",
        fix="; ".join(changes),
        evidence={
            "wait_share": round(share, 3),
            "wait_ms": round(mean_wait * 1000, 2),
            **settings,
        },  # fmt: skip
    )


__all__ = [
    "DataBottleneckProbe",
    "EvalModeInTrainProbe",
    "LossInputsProbe",
    "SamplerEpochProbe",
    "TrainModeInEvalProbe",
]
