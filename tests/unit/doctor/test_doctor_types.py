"""The doctor's typed contract with its probes: a handler named after no event is
refused (with the closest name), every event a probe hears has the type
``EVENT_TYPES`` names, every built-in probe's handlers say so, and the trackers several
probes follow are built once per run, not once per probe."""

from __future__ import annotations

import inspect
import typing

import pytest
import torch
from torch import nn

from trainwell.doctor import gradients as gradients_mod
from trainwell.doctor.coverage import Coverage
from trainwell.doctor.events import END, EVENT_TYPES, EVENTS, StepEvent, UpdateEvent
from trainwell.doctor.frame import Doctor
from trainwell.doctor.handlers import UnknownEvent, probe_handlers
from trainwell.doctor.memory_series import MemorySeries, ScriptProfile
from trainwell.doctor.overfit import OverfitCheck
from trainwell.doctor.probes.loss_no_gradient import LossNoGradientProbe
from trainwell.doctor.probes.param_not_in_optimizer import ParamNotInOptimizerProbe
from trainwell.doctor.probes.step_before_backward import StepBeforeBackwardProbe
from trainwell.doctor.probes.unregistered_module import UnregisteredModuleProbe
from trainwell.doctor.registry import default_probes
from trainwell.errors import UserError


def _probe_with(name: str) -> object:
    """A probe class whose one handler is called ``name``."""
    return type("Typo" + name.title().replace("_", ""), (), {name: lambda self, doc, ev: None})()


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("on_forwad", "on_forward"),
        ("on_stpe", "on_step"),
        ("on_zerograd", "on_zero_grad"),
        ("on_backwards", "on_backward"),
        ("on_ends", "on_end"),
        ("on_epoch_ended", "on_epoch_end"),
        ("on_optimiser_created", "on_optimizer_created"),
        ("on_prestep", "on_pre_step"),
    ],
)
def test_a_misspelt_handler_is_refused_with_the_closest_event(name, closest):
    probe = _probe_with(name)
    before = nn.Module.__call__
    with pytest.raises(UnknownEvent) as info:
        Doctor(probes=[probe])
    message = str(info.value)
    assert type(probe).__name__ in message and f"{name} names no event" in message
    assert message.endswith(f"did you mean {closest}?")
    assert "\n" not in message  # one line, as the CLI prints a UserError
    assert isinstance(info.value, UserError)
    assert nn.Module.__call__ is before  # refused before anything was put on torch


def test_a_handler_far_from_every_event_lists_the_events():
    with pytest.raises(UnknownEvent) as info:
        probe_handlers(_probe_with("on_quux"))
    message = str(info.value)
    assert "on_quux names no event; the events: on_batch," in message
    assert all(name in message for name in (*EVENTS, END))


def test_a_probe_among_valid_ones_is_still_refused_by_name():
    class LateProbe:
        def on_step(self, doc, event): ...

        def on_scheduler_stepped(self, doc, event): ...

    late = r"LateProbe: on_scheduler_stepped .* on_scheduler_step\?"
    with pytest.raises(UnknownEvent, match=late):
        Doctor(probes=[*default_probes(), LateProbe()])


def test_valid_handlers_plain_attributes_and_other_methods_are_accepted():
    class Fine:
        on_gpu = True  # a flag, not a handler
        on_target: int | None = None

        def on_step(self, doc, event): ...

        def on_end(self, doc): ...

        def once(self): ...

    assert list(probe_handlers(Fine())) == ["on_step"]  # on_end is called apart


class _Recorder:
    """Every event, with the type it came as."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    def __getattr__(self, name: str):
        if name in EVENTS:
            return lambda doc, event: self.seen.append((name, event))
        raise AttributeError(name)

    def __dir__(self):
        return [*EVENTS, "seen"]


def _train_everything(doc: Doctor) -> None:
    """A loop that makes every kind of event a CPU run has."""
    with doc:
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
        data = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,))),
            batch_size=4,
        )
        scaler = torch.amp.GradScaler("cpu")
        model.train()
        for i, (x, y) in enumerate(data):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            if i == 0:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            else:  # a step through a GradScaler
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
        sched.step()
        model.eval()
        with torch.no_grad():
            model(torch.randn(2, 4))
        weight = torch.zeros(3, requires_grad=True)  # a hand-written update
        (weight * 2).sum().backward()
        with torch.no_grad():
            weight -= 0.1 * weight.grad
        doc.count_step()


def test_every_event_a_probe_hears_has_its_declared_type():
    recorder = _Recorder()
    _train_everything(Doctor(probes=[recorder]))
    names = {name for name, _ in recorder.seen}
    expected = {"on_batch", "on_forward", "on_nograd_forward", "on_backward", "on_zero_grad",
                "on_pre_step", "on_step", "on_update", "on_scheduler_step", "on_epoch_end",
                "on_loss", "on_mode", "on_optimizer_created", "on_scheduler_created",
                "on_clip", "on_scaler_step", "on_scaler_update"}  # fmt: skip
    assert expected <= names, expected - names
    for name, event in recorder.seen:
        assert type(event) is EVENT_TYPES[name], (name, type(event))
    steps = [e for n, e in recorder.seen if n in ("on_pre_step", "on_step")]
    assert steps and all(isinstance(e.optimizer, torch.optim.SGD) for e in steps)
    (update,) = [e for n, e in recorder.seen if n == "on_update"]
    assert isinstance(update, UpdateEvent) and not hasattr(update, "optimizer")
    assert update.step == max(e.step for e in steps) + 1
    backwards = [e.index for n, e in recorder.seen if n == "on_backward"]
    assert backwards == list(range(1, len(backwards) + 1))
    modes = [e for n, e in recorder.seen if n == "on_mode"]
    assert [m.mode for m in modes] == [True, False] and all(m.module is not None for m in modes)


def _built_in_probes() -> list[object]:
    return [*default_probes(), OverfitCheck()]


def test_every_built_in_probe_types_its_handlers_with_their_event():
    classes = [type(p) for p in _built_in_probes()] + [MemorySeries, ScriptProfile]
    checked = 0
    for cls in classes:
        for name in EVENTS:
            method = getattr(cls, name, None)
            if method is None:
                continue
            hints = typing.get_type_hints(method)
            params = list(inspect.signature(method).parameters)
            assert len(params) == 3, (cls.__name__, name, params)  # self, doc, event
            assert hints[params[2]] is EVENT_TYPES[name], (cls.__name__, name, hints[params[2]])
            checked += 1
    assert checked > 60  # every probe's handlers, not a few


def test_every_built_in_probe_is_accepted():
    doc = Doctor(probes=_built_in_probes())
    assert all(probe_handlers(p) or hasattr(p, "on_end") for p in doc.probes)


def test_the_shared_trackers_are_built_once_per_run(monkeypatch):
    made = {"fresh": 0, "coverage": 0}

    def counting(cls, key):
        init = cls.__init__

        def wrapped(self, *args, **kwargs):
            made[key] += 1
            init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", wrapped)

    counting(gradients_mod.FreshGradients, "fresh")
    counting(Coverage, "coverage")
    doc = Doctor()  # every probe, two of which follow each tracker
    fresh = (StepBeforeBackwardProbe, LossNoGradientProbe)
    coverage = (ParamNotInOptimizerProbe, UnregisteredModuleProbe)
    assert sum(isinstance(p, fresh) for p in doc.probes) == 2
    assert sum(isinstance(p, coverage) for p in doc.probes) == 2
    assert made == {"fresh": 1, "coverage": 1}
    _train_everything(doc)
    assert made == {"fresh": 1, "coverage": 1}  # not rebuilt as the run goes
    Doctor(probes=[StepBeforeBackwardProbe(), StepBeforeBackwardProbe(), LossNoGradientProbe()])
    assert made == {"fresh": 2, "coverage": 1}  # a new run: its own
    Doctor(probes=[])
    assert made == {"fresh": 2, "coverage": 1}  # no probe follows them: none built


def test_the_probes_of_a_run_share_one_tracker_of_each_kind():
    doc = Doctor()
    by_type = {type(p): p for p in doc.probes}
    step, loss = by_type[StepBeforeBackwardProbe], by_type[LossNoGradientProbe]
    assert step.grads is not loss.grads  # each its own verdicts...
    assert step.grads.shared is loss.grads.shared  # ...over the one record
    assert by_type[ParamNotInOptimizerProbe].coverage is by_type[UnregisteredModuleProbe].coverage
    assert Doctor().trackers.get(Coverage) is not by_type[UnregisteredModuleProbe].coverage


def _stale_steps(doc: Doctor, steps: int = 6) -> None:
    """zero_grad between backward and step: every step is stale."""
    with doc:
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(steps):
            model(torch.randn(4, 3)).pow(2).mean().backward()
            opt.zero_grad()
            opt.step()


def _zero_loss(doc: Doctor, steps: int = 6) -> None:
    """A loss the weights do not change: every gradient is exactly zero."""
    with doc:
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(steps):
            opt.zero_grad()
            (model(torch.randn(4, 3)) * 0).sum().backward()
            opt.step()


@pytest.mark.parametrize(
    ("loop", "code", "probe"),
    [
        (_stale_steps, "step-before-backward", StepBeforeBackwardProbe),
        (_zero_loss, "loss-no-gradient", LossNoGradientProbe),
    ],
)
def test_a_shared_tracker_counts_each_event_once(loop, code, probe):
    """The same verdict, on the same step, whether the probe runs alone, beside the
    other probe that feeds its tracker, or beside every probe."""
    alone, pair, every = Doctor(probes=[probe()]), Doctor(
        probes=[StepBeforeBackwardProbe(), LossNoGradientProbe()]
    ), Doctor()
    evidence = []
    for doc in (alone, pair, every):
        loop(doc)
        (finding,) = [f for f in doc.findings if f.code == code]
        evidence.append(finding.evidence["steps_observed"])
    assert evidence == [3, 3, 3]  # its STREAK: the third bad step in a row


def test_step_events_always_carry_their_optimizer():
    seen: list[StepEvent] = []

    class Steps:
        def on_pre_step(self, doc, event: StepEvent) -> None:
            seen.append(event)

        def on_step(self, doc, event: StepEvent) -> None:
            seen.append(event)

    doc = Doctor(probes=[Steps()])
    with doc:
        w = nn.Parameter(torch.ones(2))
        opt = torch.optim.LBFGS([w], max_iter=2)

        def closure():
            opt.zero_grad()
            loss = (w**2).sum()
            loss.backward()
            return loss

        opt.step(closure)
    assert [e.closure for e in seen] == [True, True]  # pre and post both say so
    assert all(e.optimizer is opt for e in seen)
