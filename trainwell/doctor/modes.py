"""The modes-and-data probes: dropout / batch norm in the wrong mode, a
DistributedSampler that repeats its order, labels out of range, probabilities fed to a
loss that wants logits, and a loop that waits for its data.
"""

from __future__ import annotations

import ast
import math
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

    A single no-grad forward per training step is left alone: a GAN's generator making
    samples for the discriminator, a momentum encoder, both trained in train mode on
    purpose. Forwards from library code (``swa_utils.update_bn``) are too.
    """

    def __init__(self) -> None:
        self.cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.run: dict[int, tuple[int, Site | None]] = {}  # id(model) -> (count, first site)
        self.reported = False

    def on_forward(self, doc: Any, event: ForwardEvent) -> None:
        if event.grad_enabled or self.reported:
            return
        modules = _mode_modules(event.module, self.cache)
        if not modules or not any(m.training for m in modules):
            self.run.pop(id(event.module), None)
            return
        if not event.caller_is_user():
            return
        count, site = self.run.get(id(event.module), (0, None))
        count, site = count + 1, site or event.site
        self.run[id(event.module)] = (count, site)
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

    def on_step(self, doc: Any, event: StepEvent) -> None:
        self.run.clear()


# ---- eval-mode-in-train -----------------------------------------------------------------------


class EvalModeInTrainProbe:
    """``eval-mode-in-train``: a container module (a model, a backbone) in eval mode
    whose dropout modules, or batch norms with trainable weights, are updated by the
    optimizer: ``model.eval()`` for validation never undone, a pretrained backbone
    loaded in eval mode.

    Batch norms put in eval one by one (frozen statistics while fine-tuning) are a
    deliberate choice and stay silent, as do eval-mode parts whose weights are frozen,
    and an ``eval()`` called inside the training loop itself, before its training
    forwards, with no evaluation in between (keeping a backbone's statistics frozen
    each epoch). An ``eval()`` followed by no-grad forwards (an evaluation) and then
    training is the forgotten ``model.train()``. Checked at the first steps and at the
    first steps after each mode switch.
    """

    CHECKS = 2  # steps looked at after each mode switch

    def __init__(self) -> None:
        self.eval_sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.forwards: dict[int, tuple[Any, Site | None]] = {}  # this step's models
        self.left = self.CHECKS

    def on_mode(self, doc: Any, event: CreatedEvent) -> None:
        if not event.mode:
            # [where, every user line on the stack, evaluated since]
            self.eval_sites[event.obj] = [event.site, _user_stack(), False]
        self.left = self.CHECKS

    def on_forward(self, doc: Any, event: ForwardEvent) -> None:
        if not event.grad_enabled:
            record = self.eval_sites.get(event.module) if self.eval_sites else None
            if record is not None:
                record[2] = True
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
            if record is not None and not record[2] and _in_loop_with(record[1], train_site):
                return  # put in eval on purpose, each time round the training loop
            site = (record[0] if record is not None else None) or train_site
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
    """``sampler-epoch-not-set``: a shuffling ``DistributedSampler`` starting a second
    pass with the same epoch number: it yields the same order as the last pass."""

    def __init__(self) -> None:
        self.epochs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def on_batch(self, doc: Any, event: BatchEvent) -> None:
        if event.index != 1:
            return
        from torch.utils.data.distributed import DistributedSampler

        sampler = getattr(event.loader, "_index_sampler", None)
        sampler = getattr(sampler, "sampler", sampler)
        if not isinstance(sampler, DistributedSampler) or not sampler.shuffle:
            return
        last = self.epochs.get(sampler)
        self.epochs[sampler] = sampler.epoch
        if last is None or last != sampler.epoch or event.site is None:
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
                 "TransposeBackward", "AliasBackward", "UnsafeViewBackward")  # fmt: skip


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

    Labels are checked on every call when they are on the CPU (a min and a max); on a
    GPU the first ``DEVICE_CHECKS`` calls (reading them makes the host wait), which
    catches the bug before CUDA's device-side assert. Probabilities are recognized by the
    operation that made them (softmax, sigmoid), which costs nothing.
    """

    DEVICE_CHECKS = 50
    ALWAYS = 64  # CPU labels checked on every call at first,
    EVERY = 8  # then one call in this many (PyTorch's own IndexError catches the rest,
    # and the crash report explains it)

    def __init__(self) -> None:
        self.device_calls = 0
        self.calls = 0
        self.first_done = False

    def on_loss(self, doc: Any, event: LossEvent) -> None:
        input, target = event.input, event.target
        if not isinstance(input, torch.Tensor) or not isinstance(target, torch.Tensor):
            return
        self._softmax(doc, event)
        # The first loss is worth computing only with labels in range (else it raises).
        labels_ok = self._labels_ok(doc, event)
        if labels_ok and not self.first_done and input.requires_grad and doc.steps == 0:
            self.first_done = True
            self._first_loss(doc, event)

    def _labels_ok(self, doc: Any, event: LossEvent) -> bool:
        """False when the targets are out of range (and reported); True when they are
        fine or not looked at this time."""
        target = event.target
        self.calls += 1
        if target.device.type != "cpu":
            self.device_calls += 1
            if self.device_calls > self.DEVICE_CHECKS:
                return True
        elif self.calls > self.ALWAYS and self.calls % self.EVERY:
            return True
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
                f"{'log-softmax' if 'cross' in event.name else 'the sigmoid'} itself",
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
        if event.name == "cross_entropy" and input.dim() >= 2 and input.shape[1] > 1:
            classes = input.shape[1]
            if target.is_floating_point():
                return
            with doc.muted():
                value = torch.nn.functional.cross_entropy(
                    input.float(), target, ignore_index=kwargs.get("ignore_index", -100)
                )
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
        self.loaders: dict[int, list[float]] = {}  # id(dataset) -> [wait, total, n, last]
        self.reported: set[int] = set()

    def on_batch(self, doc: Any, event: BatchEvent) -> None:
        now = time.perf_counter()
        key = id(event.loader._dataset)
        if key in self.reported:
            return
        st = self.loaders.setdefault(key, [0.0, 0.0, 0, 0.0])
        last, st[3] = st[3], now
        if event.index <= self.SKIP:
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
    cores = len(_cores())
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


def _cores() -> set[int]:
    import os

    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


__all__ = [
    "DataBottleneckProbe",
    "EvalModeInTrainProbe",
    "LossInputsProbe",
    "SamplerEpochProbe",
    "TrainModeInEvalProbe",
]
