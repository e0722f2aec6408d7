"""The ``train-mode-in-eval`` probe."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn

from trainwell.doctor.events import CreatedEvent, ForwardEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.modules import (
    NORM,
    mode_modules,
)
from trainwell.doctor.sites import Site


class _Episode:
    """The no-grad forwards of one model at one call site: the optimizer step count at
    the last one, its input's identity and the site."""

    __slots__ = ("step", "input", "site")

    def __init__(self, step: int, input: Any, site: Any) -> None:
        self.step, self.input, self.site = step, input, site


def _input_id(args: tuple) -> Any:
    """The first tensor argument, weakly: the same tensor evaluated again (a fixed
    validation set) is still there (an address could be a new tensor's)."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return weakref.ref(a)
    return None


def _same(ref: Any, args: tuple) -> bool:
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    return ref is not None and first is not None and ref() is first


class TrainModeInEvalProbe:
    """``train-mode-in-eval``: a model forwarded under ``no_grad`` / ``inference_mode``
    while its dropout or batch-norm modules are in training mode, as an evaluation: twice
    with no optimizer step between (an evaluation loop), or once per evaluation from the
    same line, evaluations repeated with training between (full-batch evaluation once an
    epoch): steps apart, or on the same input tensor each time.

    Left alone, as deliberate: a single no-grad forward per training step on fresh
    inputs (pseudo-labels); a model whose training outputs feed another model (a GAN's
    generator making samples, under no_grad, for the discriminator or for a picture); a
    model no optimizer trains (a momentum encoder or BYOL target network, fed two views
    per step); a model in eval mode whose dropout alone was switched back on (Monte
    Carlo dropout); batch norms with ``momentum=None`` (precise-BN statistics recomputed
    under no_grad); forwards from library code (``swa_utils.update_bn``).
    """

    FEED_STEPS = 32  # optimizer steps in which a model feeding another is looked for

    def __init__(self) -> None:
        self.cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # id(model) -> (optimizer steps so far, no-grad forwards since, first one's site)
        self.run: dict[int, tuple[int, int, Site | None]] = {}
        self.episodes: dict[tuple[int, Any], _Episode] = {}
        self.optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self.trained: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()
        self.feeders: set[int] = set()  # models whose training output fed another model
        self.outputs: dict[int, Any] = {}  # id(model) -> its last training output, weakly
        self.reported = False

    def on_optimizer_created(self, doc: Reporter, event: CreatedEvent) -> None:
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

    def _training_forward(self, event: ForwardEvent) -> None:
        """Note a model whose output is another model's input (a generator)."""
        me = id(event.module)
        arg = event.args[0] if event.args else None
        if isinstance(arg, torch.Tensor):
            for model, out in self.outputs.items():
                if model != me and arg is out():
                    self.feeders.add(model)
        out = event.output
        if isinstance(out, torch.Tensor):
            self.outputs[me] = weakref.ref(out)

    def on_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        # A generator feeds the discriminator from the first steps: looked for then.
        if doc.steps >= self.FEED_STEPS or self.reported:
            doc.unsubscribe(self, "on_forward")  # from now on, evaluations only
        elif event.grad_enabled:
            self._training_forward(event)

    def on_nograd_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        if self.reported:
            return
        model = event.module
        modules = mode_modules(model, self.cache)
        if not model.training or not any(m.training for m in modules):
            self.run.pop(id(model), None)
            return
        if any(isinstance(m, NORM) and m.momentum is None and m.training for m in modules):
            return  # cumulative statistics: precise BN, recomputed on purpose
        if not event.caller_is_user() or not self._trained(model):
            return
        site = self._evaluation(doc, event)
        if site is not None:
            self._report(doc, model, modules, site)

    def _evaluation(self, doc: Reporter, event: ForwardEvent) -> Site | None:
        """The site of the evaluation this forward shows, if it shows one."""
        model = event.module
        step, count, site = self.run.get(id(model), (doc.steps, 0, None))
        if step != doc.steps:  # an optimizer step came between: not one evaluation
            count, site = 0, None
        count, site = count + 1, site or event.site
        self.run[id(model)] = (doc.steps, count, site)
        if count >= 2 and site is not None:
            return site
        key = (id(model), event.key)
        episode = self.episodes.get(key)
        if episode is None:
            self.episodes[key] = _Episode(doc.steps, _input_id(event.args), site)
            return None
        if episode.step == doc.steps:
            return None
        gap, same = doc.steps - episode.step, _same(episode.input, event.args)
        episode.step = doc.steps
        if (gap >= 2 or same) and id(model) not in self.feeders:
            return episode.site
        return None

    def _report(self, doc: Reporter, model: nn.Module, modules: list, site: Site) -> None:
        self.reported = True
        training = [type(m).__name__ for m in modules if m.training]
        doc.add(
            Finding(
                code="train-mode-in-eval",
                severity="error",
                file=site.file,
                line=site.line,
                message=f"evaluation under no_grad with {type(model).__name__} in "
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
