"""Tests for trainwell.engine.build.optim: parameter groups, optimizers, lr schedules, configs."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from trainwell.engine.build.optim import (
    OptimConfig,
    SchedConfig,
    build_optimizer,
    build_scheduler,
    lr_factor,
    param_groups,
)
from trainwell.errors import UserError


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 8)
        self.ln = nn.LayerNorm(8)
        self.head = nn.Linear(8, 3, bias=False)
        self.frozen = nn.Linear(8, 8)
        self.frozen.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        return self.head(self.ln(self.fc(x.flatten(1))))


def ids(params) -> set[int]:
    return {id(p) for p in params}


# --- param_groups ----------------------------------------------------------------------


def test_param_groups_split_by_identity() -> None:
    net = Net()
    groups = param_groups(net, 0.05)
    assert len(groups) == 2
    decay, no_decay = groups
    assert decay["weight_decay"] == 0.05
    assert no_decay["weight_decay"] == 0.0
    assert ids(decay["params"]) == ids(
        [net.conv.weight, net.fc.weight, net.head.weight, net.frozen.weight]
    )
    assert ids(no_decay["params"]) == ids(
        [net.conv.bias, net.bn.weight, net.bn.bias, net.fc.bias, net.ln.weight, net.ln.bias,
         net.frozen.bias]
    )  # fmt: skip
    # Frozen parameters are in their group (issue 23: unfrozen later, they train; the
    # optimizer skips them while they get no gradient); nothing is listed twice.
    everything = decay["params"] + no_decay["params"]
    assert len(everything) == len(ids(everything)) == 11


def test_param_groups_without_biases_has_one_group() -> None:
    net = nn.Linear(3, 2, bias=False)
    groups = param_groups(net, 0.1)
    assert len(groups) == 1
    assert ids(groups[0]["params"]) == {id(net.weight)}


# --- build_optimizer -------------------------------------------------------------------


def test_build_adamw() -> None:
    net = Net()
    cfg = OptimConfig(name="adamw", lr=0.02, weight_decay=0.3, betas=[0.8, 0.95], eps=1e-6)
    opt = build_optimizer(cfg, net)
    assert type(opt) is torch.optim.AdamW
    assert [g["lr"] for g in opt.param_groups] == [0.02, 0.02]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.3, 0.0]
    assert all(tuple(g["betas"]) == (0.8, 0.95) for g in opt.param_groups)
    assert all(g["eps"] == 1e-6 for g in opt.param_groups)
    assert ids(opt.param_groups[0]["params"]) == ids(
        [net.conv.weight, net.fc.weight, net.head.weight, net.frozen.weight]
    )


def test_build_adam() -> None:
    opt = build_optimizer(OptimConfig(name="adam", lr=0.5, betas=[0.5, 0.6]), Net())
    assert type(opt) is torch.optim.Adam
    assert opt.param_groups[0]["lr"] == 0.5
    assert tuple(opt.param_groups[0]["betas"]) == (0.5, 0.6)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.05, 0.0]


@pytest.mark.parametrize("momentum, nesterov", [(0.9, True), (0.7, False), (0.0, False)])
def test_build_sgd(momentum: float, nesterov: bool) -> None:
    cfg = OptimConfig(name="sgd", lr=0.1, momentum=momentum, nesterov=nesterov)
    opt = build_optimizer(cfg, Net())
    assert type(opt) is torch.optim.SGD
    for g in opt.param_groups:
        assert (g["lr"], g["momentum"], g["nesterov"]) == (0.1, momentum, nesterov)


def test_built_optimizer_steps_and_decays_only_weights() -> None:
    # With zero gradients AdamW changes parameters only through weight decay.
    net = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))
    opt = build_optimizer(OptimConfig(name="adamw", lr=0.1, weight_decay=0.5), net)
    before = [p.detach().clone() for p in net.parameters()]
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    after = list(net.parameters())
    w, b, ln_w, ln_b = zip(before, after)
    assert torch.allclose(w[1], w[0] * (1 - 0.1 * 0.5))
    for old, new in (b, ln_w, ln_b):
        assert torch.equal(old, new)


# --- lr_factor -------------------------------------------------------------------------


def test_warmup_is_linear_and_reaches_one_at_last_warmup_step() -> None:
    for name in ("cosine", "constant", "step"):
        cfg = SchedConfig(name=name, warmup_steps=5, min_lr_ratio=0.0)
        factors = [lr_factor(cfg, s, 100) for s in range(5)]
        assert factors == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
        assert lr_factor(cfg, 5, 100) == pytest.approx(1.0)


def test_no_warmup_starts_at_peak() -> None:
    for name in ("cosine", "constant", "step"):
        assert lr_factor(SchedConfig(name=name, warmup_ratio=0.0), 0, 100) == 1.0


def test_cosine_decays_monotonically_to_floor() -> None:
    cfg = SchedConfig(name="cosine", warmup_steps=10, min_lr_ratio=0.1)
    total = 110
    factors = [lr_factor(cfg, s, total) for s in range(total + 20)]
    after_warmup = factors[9:]
    assert all(b <= a + 1e-12 for a, b in zip(after_warmup, after_warmup[1:]))
    assert factors[10] == pytest.approx(1.0)
    assert factors[60] == pytest.approx(0.1 + 0.9 * 0.5)  # half way through the decay
    assert factors[total - 1] > 0.1
    assert factors[total - 1] == pytest.approx(0.1, abs=1e-3)
    assert factors[total] == pytest.approx(0.1)
    assert factors[-1] == pytest.approx(0.1)  # stays at the floor past the end
    assert min(factors) == pytest.approx(0.1)


def test_cosine_floor_zero_and_one() -> None:
    zero = SchedConfig(name="cosine", warmup_ratio=0.0, min_lr_ratio=0.0)
    assert lr_factor(zero, 50, 50) == pytest.approx(0.0)
    one = SchedConfig(name="cosine", warmup_ratio=0.0, min_lr_ratio=1.0)
    assert {lr_factor(one, s, 50) for s in range(60)} == {1.0}


def test_constant_after_warmup() -> None:
    cfg = SchedConfig(name="constant", warmup_steps=3)
    assert [lr_factor(cfg, s, 20) for s in range(3, 40)] == [1.0] * 37


def test_step_multiplies_by_gamma_every_step_size() -> None:
    cfg = SchedConfig(name="step", warmup_steps=2, step_size=3, gamma=0.5)
    got = [lr_factor(cfg, s, 100) for s in range(2, 14)]
    want = [1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125]
    assert got == pytest.approx(want)


# --- build_scheduler -------------------------------------------------------------------


@pytest.mark.parametrize(
    "sched",
    [
        SchedConfig(name="cosine", warmup_steps=5, min_lr_ratio=0.05),
        SchedConfig(name="constant", warmup_steps=7),
        SchedConfig(name="step", warmup_steps=4, step_size=10, gamma=0.3),
    ],
    ids=["cosine", "constant", "step"],
)
def test_scheduler_follows_lr_factor_on_a_real_optimizer(sched: SchedConfig) -> None:
    peak, total = 0.04, 50
    net = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))
    opt = build_optimizer(OptimConfig(name="sgd", lr=peak, momentum=0.9), net)
    scheduler = build_scheduler(sched, opt, total)
    seen = []
    for step in range(total):
        want = peak * lr_factor(sched, step, total)
        for g in opt.param_groups:
            assert g["lr"] == pytest.approx(want, rel=1e-12, abs=1e-15), step
        seen.append(opt.param_groups[0]["lr"])
        net(torch.randn(3, 2)).sum().backward()
        opt.step()
        opt.zero_grad()
        scheduler.step()
    assert seen[0] == pytest.approx(peak / sched.warmup_steps)
    assert max(seen) == pytest.approx(peak)


def test_scheduler_state_round_trip() -> None:
    sched = SchedConfig(name="cosine", warmup_steps=3)
    net = nn.Linear(2, 2)
    opt = build_optimizer(OptimConfig(lr=0.1), net)
    s1 = build_scheduler(sched, opt, 20)
    for _ in range(8):
        opt.step()
        s1.step()
    state = s1.state_dict()
    opt2 = build_optimizer(OptimConfig(lr=0.1), net)
    s2 = build_scheduler(sched, opt2, 20)
    s2.load_state_dict(state)
    opt2.load_state_dict(opt.state_dict())
    for _ in range(5):
        opt.step()
        s1.step()
        opt2.step()
        s2.step()
        assert opt2.param_groups[0]["lr"] == pytest.approx(opt.param_groups[0]["lr"])
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * lr_factor(sched, 13, 20))


# --- invalid configs -------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls, kwargs, key",
    [
        (OptimConfig, {"name": "rmsprop"}, "optim.name"),
        (OptimConfig, {"lr": 0}, "optim.lr"),
        (OptimConfig, {"lr": -1e-3}, "optim.lr"),
        (OptimConfig, {"weight_decay": -0.1}, "optim.weight_decay"),
        (OptimConfig, {"betas": [0.9, 0.99, 0.999]}, "optim.betas"),
        (OptimConfig, {"betas": [0.9]}, "optim.betas"),
        (OptimConfig, {"betas": [0.9, 1.0]}, "optim.betas"),
        (OptimConfig, {"momentum": -0.5}, "optim.momentum"),
        (OptimConfig, {"name": "sgd", "momentum": 0.0, "nesterov": True}, "optim.nesterov"),
        (SchedConfig, {"name": "linear"}, "sched.name"),
        (SchedConfig, {"warmup_steps": -1}, "sched.warmup_steps"),
        (SchedConfig, {"min_lr_ratio": 1.5}, "sched.min_lr_ratio"),
        (SchedConfig, {"min_lr_ratio": -0.1}, "sched.min_lr_ratio"),
        (SchedConfig, {"step_size": 0}, "sched.step_size"),
        (SchedConfig, {"gamma": 0}, "sched.gamma"),
        (SchedConfig, {"gamma": 1.5}, "sched.gamma"),
    ],
)
def test_invalid_configs_name_the_key(cls, kwargs: dict, key: str) -> None:
    with pytest.raises(UserError) as info:
        cls(**kwargs)
    assert str(info.value).startswith(f"{key}:")


def test_valid_edge_configs() -> None:
    # Nesterov with no momentum matters only for SGD; Adam ignores both.
    assert OptimConfig(name="adam", momentum=0.0, nesterov=True).name == "adam"
    assert OptimConfig(name="sgd", momentum=0.0, nesterov=False).momentum == 0.0
    assert OptimConfig(weight_decay=0.0, betas=[0.0, 0.0]).weight_decay == 0.0
    assert SchedConfig(gamma=1.0, min_lr_ratio=0.0).gamma == 1.0
    assert math.isclose(SchedConfig().min_lr_ratio, 0.01)
